"""Content-hashed keys: the same artifact gets the same key on every rank and host."""
from pcompile.keys.fingerprint import Target, fingerprint
from pcompile.keys.key import LAYERS, Key, KeyInputs, make_key

__all__ = ["LAYERS", "Key", "KeyInputs", "Target", "fingerprint", "make_key"]
