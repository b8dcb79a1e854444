"""compat/cache_dir.py: torch still writes its default Inductor cache dir into the environment when
Dynamo is imported, and pcompile can still compute that default to tell it from a user's choice."""
from __future__ import annotations

import os
import subprocess
import sys

from pcompile.inductor import _testing as t
from pcompile.compat import cache_dir as compat


def test_check_passes_on_this_torch() -> None:
    compat.check()


def test_dynamo_import_fills_in_the_default_we_compute() -> None:
    code = "import os, torch._dynamo; print(os.environ.get('TORCHINDUCTOR_CACHE_DIR'))"
    out = subprocess.run([sys.executable, "-c", code], env=t.clean_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    filled = out.stdout.strip().splitlines()[-1]
    assert filled != "None", "Dynamo no longer sets TORCHINDUCTOR_CACHE_DIR at import; env.py can be simplified"
    assert os.path.abspath(filled) == compat.torch_default_dir()


def test_the_default_is_computed_without_importing_inductor() -> None:
    """The autoload asks at the end of `import torch`: importing Inductor's package there cost every
    torch-importing process 1.6-4 s, compiling or not."""
    code = ("import os, sys, torch; from pcompile.compat import cache_dir; d = cache_dir.torch_default_dir(); "
            "print(d, 'torch._inductor' in sys.modules); import torch._inductor.runtime.cache_dir_utils as u; "
            "print(os.path.abspath(u.default_cache_dir()))")
    out = subprocess.run([sys.executable, "-c", code], env=t.clean_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.strip().splitlines()[-2:]
    computed, inductor_imported = first.rsplit(" ", 1)
    assert inductor_imported == "False", out.stdout
    assert computed == second, out.stdout  # the same answer as torch's own import of the module


def test_forget_paths_empties_inductors_in_memory_code_caches() -> None:
    """private_dir.fall_back relies on it: a compile retried in the private dir must not reuse a
    path under the full cache dir (tests/test_faults.py row full-in-link failed that way)."""
    import torch._inductor.codecache as codecache
    import torch._inductor.utils as utils

    from pcompile.compat import cache_dir

    assert callable(getattr(utils, "clear_caches", None))
    codecache.CppCodeCache.cache["pcompile-test-key"] = object()
    cache_dir.forget_paths()
    assert "pcompile-test-key" not in codecache.CppCodeCache.cache
