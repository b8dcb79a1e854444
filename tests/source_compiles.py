"""A snippet for probe scripts: from where it runs on, `compiled` lists every module Python
compiles from source (bytecode it could not read), so a test can tell kept bytecode from none."""

COUNT_SOURCE_COMPILES = r"""
import importlib._bootstrap_external as _ext
compiled = []
_original = _ext.SourceLoader.source_to_code
def _counted(self, data, path, *args, **kwargs):
    compiled.append(str(path))
    return _original(self, data, path, *args, **kwargs)
_ext.SourceLoader.source_to_code = _counted
"""
