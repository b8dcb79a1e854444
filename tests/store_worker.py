"""A child process for the store tests: publishes/reads keys through a real Store.

Usage: python store_worker.py MODE ARGS... (modes below). Prints one JSON line of results.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

from pcompile.config import Settings
from pcompile.keys import make_key
from pcompile.store.entry import Entry
from pcompile.store.compose import open_store
from pcompile.store.tiered import Store

FP = {"torch": "test", "target_arch": "sm_90"}


def payload(name: str, size: int) -> bytes:
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def key_of(name: str):
    return make_key("kernel", name, FP)


def store_from_env() -> Store:
    return open_store(Settings.from_env())


def hammer(names: list[str], log: Path, compile_s: float, size: int, start_at: float) -> dict:
    store = store_from_env()
    while time.time() < start_at:
        time.sleep(0.005)
    digests = {}
    outcomes = {}
    for name in names:
        key, inputs = key_of(name)

        def compute(name=name, key=key, inputs=inputs) -> Entry:
            with open(log, "a") as fh:
                fh.write(f"{name} {os.getpid()}\n")
            time.sleep(compile_s)
            return Entry(key, {"code": payload(name, size), "meta": name.encode()}, inputs)

        entry, outcome = store.get_or_compute(key, compute)
        digests[name] = hashlib.sha256(entry.blobs["code"]).hexdigest()
        outcomes[name] = outcome
    store.close()
    return {"digests": digests, "outcomes": outcomes}


def publish_forever(size: int) -> None:
    """Publish fresh entries as fast as possible until killed (for SIGKILL tests)."""
    store = store_from_env()
    i = 0
    while True:
        key, inputs = key_of(f"crash-{os.getpid()}-{i}")
        store.put(Entry(key, {"a": payload(f"a{i}", size), "b": payload(f"b{i}", size // 3)}, inputs))
        print(str(key), flush=True)
        i += 1


def hold_lease_then_hang(name: str) -> None:
    store = store_from_env()
    key, _ = key_of(name)
    got = store.acquire_or_wait(key, wait_timeout=5)
    print("HOLDING" if got is not None and not isinstance(got, Entry) else "NOT-HOLDING", flush=True)
    time.sleep(3600)


def hold_then_publish(name: str, hold_s: float, publish: bool) -> None:
    """Take the key's lease, say so, hold it for `hold_s`, then publish (or not: a failed
    compile) and release it; prints the time of the release."""
    store = store_from_env()
    key, inputs = key_of(name)
    lease = store.acquire_or_wait(key, wait_timeout=5)
    assert lease is not None and not isinstance(lease, Entry)
    print("HOLDING", flush=True)
    time.sleep(hold_s)
    if publish:
        store.put(Entry(key, {"code": payload(name, 1000)}, inputs))
    lease.release()
    print(json.dumps({"released": time.time()}), flush=True)
    store.close()


def main() -> None:
    mode = sys.argv[1]
    if mode == "hammer":
        names = sys.argv[2].split(",")
        out = hammer(names, Path(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]))
        print(json.dumps(out))
    elif mode == "publish_forever":
        publish_forever(int(sys.argv[2]))
    elif mode == "hold":
        hold_lease_then_hang(sys.argv[2])
    elif mode == "hold_then_publish":
        hold_then_publish(sys.argv[2], float(sys.argv[3]), sys.argv[4] == "publish")
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
