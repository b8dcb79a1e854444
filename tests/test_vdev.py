"""The virtual CUDA device: builds with the system compiler, answers from a profile, parses cubins,
and is never loaded into this (pytest) process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pcompile.errors import PcompileError
from pcompile.vdev import build, preload
from pcompile.vdev.profile import builtin_names, describe, resolve

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="LD_PRELOAD virtual device is Linux-only")


@pytest.fixture(scope="module")
def lib(vdev_dir: Path) -> Path:
    return build.library()


def _run_under_vdev(lib: Path, tmp: Path, code: str, strict: bool = False, devices: int = 1) -> dict:
    env = preload.child_env(lib, resolve("h100"), tmp, strict, devices=devices)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_builtin_h100_profile_resolves():
    assert "h100-sxm5-80gb" in builtin_names()
    for alias in ("h100", "sm_90", "h100-sxm5-80gb"):
        prof = resolve(alias)
        assert prof.arch == "sm_90"
        assert prof.name.startswith("NVIDIA H100")
        assert len(prof.prop_bytes) == 1008
    text = describe(resolve("h100"))
    assert "SMs 132" in text and "sm_90" in text


def test_unknown_target_is_one_line_error():
    with pytest.raises(PcompileError, match="unknown target"):
        resolve("a100-made-up")


def test_library_builds_once_and_answers_device_count(lib, tmp_path):
    assert lib.name == "libcuda.so.1" and lib.exists()
    assert build.library() == lib  # cached by source hash
    code = (
        "import ctypes, json\n"
        "rt = ctypes.CDLL('libcuda.so.1')\n"
        "n = ctypes.c_int(-1); assert rt.cudaGetDeviceCount(ctypes.byref(n)) == 0\n"
        "name = ctypes.create_string_buffer(256); rt.cuDeviceGetName(name, 256, 0)\n"
        "buf = ctypes.create_string_buffer(1008); assert rt.cudaGetDeviceProperties(buf, 0) == 0\n"
        "v = ctypes.c_int(); rt.cuDeviceGetAttribute(ctypes.byref(v), 16, 0)\n"
        "print(json.dumps({'count': n.value, 'name': name.value.decode(), 'prop_name': buf.raw[:256].split(b'\\0')[0].decode(), 'sms': v.value}))\n"
    )
    got = _run_under_vdev(lib, tmp_path, code)
    prof = resolve("h100")
    assert got == {"count": 1, "name": prof.name, "prop_name": prof.name, "sms": 132}


def test_torch_sees_one_h100_and_launches_are_swallowed(lib, tmp_path):
    code = (
        "import torch, json\n"
        "from pcompile.vdev import preload\n"
        "p = torch.cuda.get_device_properties(0)\n"
        "x = torch.full((8,), 3.0, device='cuda')\n"  # a fill kernel (2.15 zeroes with cudaMemsetAsync)
        "stats = preload.stats_here()\n"
        "print(json.dumps({'avail': torch.cuda.is_available(), 'name': p.name, 'cc': [p.major, p.minor],\n"
        "  'launches': stats.get('launch', 0), 'refused': sorted(k for k in stats if k.startswith('unsupported:'))}))\n"
    )
    got = _run_under_vdev(lib, tmp_path, code)
    assert got["avail"] and got["name"] == resolve("h100").name and got["cc"] == [9, 0]
    assert got["launches"] >= 1
    assert got["refused"] == []  # torch's CUDA init asks nothing the device refuses (2.14: cuLogsRegisterCallback)


def test_strict_mode_makes_a_launch_an_error(lib, tmp_path):
    env = preload.child_env(lib, resolve("h100"), tmp_path, strict=True)
    code = "import torch; torch.full((4,), 3.0, device='cuda'); torch.cuda.synchronize(); print('ran')"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "strict mode" in out.stderr and "native CUDA kernel" in out.stderr


def test_not_loaded_into_pytest_process():
    assert not preload.loaded_here()
    assert "libcuda.so.1" not in os.environ.get("LD_PRELOAD", "")


def test_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(PcompileError, match="no C compiler"):
        build.find_compiler()


def _cubin(tmp_path: Path) -> tuple[Path, int]:
    """A small sm_90 cubin with one kernel `kern`, and the register count ptxas reports."""
    import re

    from pcompile.vdev.capture import ptxas_path

    ptxas = ptxas_path(90)
    ptx = tmp_path / "k.ptx"
    ptx.write_text(
        ".version 8.0\n.target sm_90\n.address_size 64\n"
        ".visible .entry kern(.param .u64 p, .param .u32 n) .maxntid 256, 1, 1\n{\n"
        " .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .f32 %f<4>;\n"
        " ld.param.u64 %rd1, [p]; ld.param.u32 %r1, [n]; mov.u32 %r2, %tid.x;\n"
        " cvta.to.global.u64 %rd2, %rd1; mul.wide.u32 %rd3, %r2, 4; add.s64 %rd2, %rd2, %rd3;\n"
        " ld.global.f32 %f1, [%rd2]; cvt.rn.f32.u32 %f2, %r1; fma.rn.f32 %f3, %f1, %f2, %f1;\n"
        " st.global.f32 [%rd2], %f3; ret;\n}\n")
    cubin = tmp_path / "k.cubin"
    out = subprocess.run([ptxas, "-v", "-arch=sm_90", str(ptx), "-o", str(cubin)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return cubin, int(re.search(r"Used (\d+) registers", out.stderr).group(1))


def test_cubin_register_count_matches_ptxas(lib, tmp_path):
    """NUM_REGS/LOCAL_SIZE from the cubin ELF equal what ptxas -v reports for the same PTX."""
    cubin, regs = _cubin(tmp_path)
    code = (
        "import ctypes, json\n"
        "d = ctypes.CDLL('libcuda.so.1')\n"
        f"img = open({str(cubin)!r}, 'rb').read()\n"
        "m = ctypes.c_void_p(); f = ctypes.c_void_p()\n"
        "assert d.cuModuleLoadData(ctypes.byref(m), img) == 0\n"
        "assert d.cuModuleGetFunction(ctypes.byref(f), m, b'kern') == 0\n"
        "def a(i):\n    v = ctypes.c_int(); assert d.cuFuncGetAttribute(ctypes.byref(v), i, f) == 0; return v.value\n"
        "print(json.dumps({'regs': a(4), 'local': a(3), 'max_threads': a(0)}))\n"
    )
    got = _run_under_vdev(lib, tmp_path, code)
    assert got["regs"] == regs
    assert got["local"] == 0
    assert got["max_threads"] == 256  # .maxntid wins over the register limit


def test_profile_show_cli_prints_the_board():
    out = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "profile", "--show", "sm_90"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "NVIDIA H100 80GB HBM3" in out.stdout and "SMs 132" in out.stdout and "torch: 2.11.0+cu130" in out.stdout


def test_several_devices_per_thread_current_device_and_pointer_devices(lib, tmp_path):
    """PCOMPILE_VDEV_DEVICES=3: three identical boards; the current device is per thread (driver
    and runtime agree on it); memory and streams remember their device."""
    code = (
        "import ctypes, json, threading\n"
        "rt = ctypes.CDLL('libcuda.so.1')\n"
        "n = ctypes.c_int(); rt.cudaGetDeviceCount(ctypes.byref(n)); dn = ctypes.c_int(); rt.cuDeviceGetCount(ctypes.byref(dn))\n"
        "assert rt.cudaSetDevice(2) == 0 and rt.cudaSetDevice(3) != 0\n"
        "cur = ctypes.c_int(); rt.cudaGetDevice(ctypes.byref(cur)); ctxdev = ctypes.c_int(); rt.cuCtxGetDevice(ctypes.byref(ctxdev))\n"
        "other = {}\n"
        "def worker():\n    v = ctypes.c_int(-1); rt.cudaGetDevice(ctypes.byref(v)); other['dev'] = v.value\n"
        "th = threading.Thread(target=worker); th.start(); th.join()\n"
        "p = ctypes.c_void_p(); assert rt.cudaMalloc(ctypes.byref(p), 1 << 20) == 0\n"
        "attr = (ctypes.c_int * 6)(); assert rt.cudaPointerGetAttributes(attr, ctypes.c_void_p(p.value + 4096)) == 0\n"
        "ordinal = ctypes.c_int(-1); assert rt.cuPointerGetAttribute(ctypes.byref(ordinal), 9, ctypes.c_uint64(p.value + 8)) == 0\n"
        "host = ctypes.create_string_buffer(64); bad = rt.cuPointerGetAttribute(ctypes.byref(ordinal), 9, ctypes.c_uint64(ctypes.addressof(host)))\n"
        "sm = ctypes.c_int(); rt.cuDeviceGetAttribute(ctypes.byref(sm), 16, 2)\n"
        "print(json.dumps({'count': n.value, 'driver_count': dn.value, 'current': cur.value, 'ctx_device': ctxdev.value,\n"
        "  'new_thread': other['dev'], 'ptr_device': attr[1], 'ptr_type': attr[0], 'ordinal': ordinal.value, 'host_refused': bad != 0, 'sms_dev2': sm.value}))\n"
    )
    got = _run_under_vdev(lib, tmp_path, code, devices=3)
    assert got == {"count": 3, "driver_count": 3, "current": 2, "ctx_device": 2, "new_thread": 0, "ptr_device": 2,
                   "ptr_type": 2, "ordinal": 2, "host_refused": True, "sms_dev2": 132}


def test_fake_tensor_addresses_are_their_devices_memory(lib, tmp_path):
    """The warm's fake tensors get addresses from pcompile_vdev_fake_address_on(nbytes, dev); pointer
    queries (Triton's launcher checks every pointer argument) answer for them as for cudaMalloc'd
    memory of that device, interior pointers included."""
    code = (
        "import ctypes, json\n"
        "rt = ctypes.CDLL('libcuda.so.1')\n"
        "fake = rt.pcompile_vdev_fake_address_on; fake.restype = ctypes.c_ulonglong; fake.argtypes = [ctypes.c_size_t, ctypes.c_int]\n"
        "got = []\n"
        "for dev in (0, 1, 1):\n"
        "    a = fake(4096, dev); o = ctypes.c_int(-1); t = ctypes.c_uint(0); d = ctypes.c_uint64(0)\n"
        "    rc = (rt.cuPointerGetAttribute(ctypes.byref(o), 9, ctypes.c_uint64(a + 100)), rt.cuPointerGetAttribute(ctypes.byref(t), 2, ctypes.c_uint64(a)),\n"
        "          rt.cuPointerGetAttribute(ctypes.byref(d), 3, ctypes.c_uint64(a)))\n"
        "    got.append([a % 512, list(rc), o.value, t.value, d.value == a])\n"
        "print(json.dumps({'got': got, 'bad_device': fake(4096, 64)}))\n"
    )
    got = _run_under_vdev(lib, tmp_path, code, devices=2)
    assert got == {"got": [[0, [0, 0, 0], 0, 2, True], [0, [0, 0, 0], 1, 2, True], [0, [0, 0, 0], 1, 2, True]], "bad_device": 0}


def test_torch_sees_two_devices_and_allocates_on_each(lib, tmp_path):
    code = (
        "import torch, json\n"
        "torch.cuda.set_device(1)\n"
        "x = torch.zeros(8, device='cuda'); y = torch.zeros(8, device='cuda:0')\n"
        "print(json.dumps({'count': torch.cuda.device_count(), 'x': str(x.device), 'y': str(y.device),\n"
        "  'names': [torch.cuda.get_device_name(i) for i in range(2)]}))\n"
    )
    got = _run_under_vdev(lib, tmp_path, code, devices=2)
    assert got["count"] == 2 and got["x"] == "cuda:1" and got["y"] == "cuda:0"
    assert got["names"] == [resolve("h100").name] * 2


def test_device_count_must_be_in_range(lib, tmp_path):
    with pytest.raises(ValueError, match="1 to 64"):
        preload.child_env(lib, resolve("h100"), tmp_path, False, devices=0)


def test_kernel_runs_only_on_the_device_it_was_loaded_on(lib, tmp_path):
    """As on a real driver: a function loaded in device 0's context, launched while device 1 is
    current (or on device 1's stream), is refused; on its own device it launches."""
    cubin, _ = _cubin(tmp_path)
    code = (
        "import ctypes, json\n"
        "d = ctypes.CDLL('libcuda.so.1')\n"
        f"img = open({str(cubin)!r}, 'rb').read()\n"
        "m = ctypes.c_void_p(); f = ctypes.c_void_p(); s1 = ctypes.c_void_p()\n"
        "assert d.cudaSetDevice(0) == 0 and d.cuModuleLoadData(ctypes.byref(m), img) == 0\n"
        "assert d.cuModuleGetFunction(ctypes.byref(f), m, b'kern') == 0\n"
        "def launch(stream):\n    return d.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, None, None)\n"
        "same = launch(None)\n"
        "d.cudaSetDevice(1); d.cudaStreamCreate(ctypes.byref(s1)); other = launch(None)\n"
        "d.cudaSetDevice(0); other_stream = launch(s1)\n"
        "print(json.dumps({'same': same, 'other_device': other, 'other_stream': other_stream}))\n"
    )
    got = _run_under_vdev(lib, tmp_path, code, devices=2)
    assert got == {"same": 0, "other_device": 400, "other_stream": 400}


def _triton_driver_source() -> str:
    triton = pytest.importorskip("triton")
    path = Path(triton.__file__).parent / "backends" / "nvidia" / "driver.c"
    if not path.exists():
        pytest.skip("this triton has no CUDA backend source")
    return path.read_text()


def test_every_driver_function_triton_links_is_defined(lib):
    """Triton compiles driver.c into cuda_utils.so against "the" libcuda.so.1 (ours under warm)
    and Python loads it with RTLD_NOW: one driver function we lack fails every warm at its first
    kernel load (triton 3.9 added cuStreamIsCapturing; the warm died with "undefined symbol")."""
    import re

    source = _triton_driver_source()
    # direct calls only; names fetched with dlsym (defineGetFunctionHandle) may be absent
    dlsymed = set(re.findall(r"defineGetFunctionHandle\(\s*\w+,\s*(cu\w+)\)", source))
    called = {n for n in re.findall(r"\b(cu[A-Z]\w+)\s*\(", source) if not n.endswith("Handle")} - dlsymed - {"cuGetErrorString"}
    assert "cuLaunchKernel" in called or "cuModuleLoadData" in called, "driver.c parse found no driver calls"
    nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    defined = {line.split()[-1] for line in nm.splitlines() if line.strip()}
    missing = sorted(n for n in called if n not in defined and f"{n}_v2" not in defined)
    assert not missing, f"vcuda.c lacks driver functions triton's driver.c calls: {missing}"


def test_missing_entry_points_and_unknown_attributes_are_counted(lib, tmp_path):
    """What a new CUDA/torch build asks for and the device cannot answer is reported by name."""
    code = (
        "import ctypes, json\n"
        "rt = ctypes.CDLL('libcuda.so.1')\n"
        "fn = ctypes.c_void_p(); st = ctypes.c_int(-1)\n"
        "rt.cudaGetDriverEntryPoint(b'cuMadeUpNewCall', ctypes.byref(fn), ctypes.c_ulonglong(0), ctypes.byref(st))\n"
        "ok = ctypes.c_void_p(); rt.cudaGetDriverEntryPoint(b'cuDeviceGet', ctypes.byref(ok), ctypes.c_ulonglong(0), ctypes.byref(st))\n"
        "v = ctypes.c_int(); bad = rt.cuDeviceGetAttribute(ctypes.byref(v), 250, 0)\n"
        "n = rt.pcompile_vdev_stats(None, 0); buf = ctypes.create_string_buffer(n + 1); rt.pcompile_vdev_stats(buf, n + 1)\n"
        "s = json.loads(buf.value)\n"
        "print(json.dumps({'fn': fn.value, 'ok': bool(ok.value), 'bad': bad, 'stats': s}))\n"
    )
    got = _run_under_vdev(lib, tmp_path, code)
    assert got["fn"] is None and got["ok"] and got["bad"] != 0
    assert got["stats"]["entry_point_missing:cuMadeUpNewCall"] == 1
    assert "entry_point_missing:cuDeviceGet" not in got["stats"]
    assert got["stats"]["attr_unknown:250"] == 1

    from pcompile.warm.report import driver_gaps

    refused, missing = driver_gaps([got["stats"], {"unsupported:cuMemCreate": 2}])
    assert refused == {"cuMemCreate": 2} and missing == {"cuMadeUpNewCall": 1, "250": 1}
