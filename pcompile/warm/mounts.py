"""The copy-on-write view of the whole file system that the warm sandbox chroots into.

Read by sandbox.py inside its fresh mount namespace. Every mount of the host is placed at the
same path under a new root M (`<run dir>/.root`):

- /proc, /sys, /dev (with /dev/shm) and every pseudo file system (cgroup, devpts, mqueue, ...):
  passed through (recursive bind), as are pcompile's own dirs (bound last, over everything);
- a writable mount: an overlay whose lower layer is the real tree and whose upper layer is
  `<run dir>/files/<its path>` (uppers never nest: a mount inside another gets its own upper
  under `<run dir>/mounts/<n>`, and the run's record links `files/<path>` to it afterwards);
- a read-only mount, or a file bind mount (a container's /etc/hosts): bound read-only.

Overlay needs the lower layer to be a directory with no mount below it in a user namespace
(the kernel refuses to clone a mount with locked children, so there `lowerdir=/` fails: checked
on Linux 6.18). A directory with mounts below it is then rebuilt as a scaffold on a tmpfs: each
entry without a mount below is overlaid on its own, symlinks are copied, and plain files
directly in such a directory (in `/` itself, say) are bound read-only. As root (privileged mode)
each mount is overlaid whole and its submounts go on top.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PASS_ROOTS = ("/proc", "/sys", "/dev")
#: where live Unix sockets of other programs are found (Ray's session dir lives in /tmp/ray)
SOCKET_ROOTS = ("/tmp", "/var/tmp", "/run", "/var/run", os.environ.get("XDG_RUNTIME_DIR") or "")
PSEUDO = {"proc", "sysfs", "devtmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "tracefs", "debugfs", "securityfs",
          "pstore", "bpf", "fusectl", "configfs", "hugetlbfs", "binfmt_misc", "autofs", "efivarfs", "nsfs",
          "rpc_pipefs", "selinuxfs", "ramfs"}

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def _remove_placeholder(target: str) -> None:
    """Drop the scaffold's stand-in for an entry that vanished (an empty dir or file, or a link)."""
    try:
        if os.path.isdir(target) and not os.path.islink(target):
            os.rmdir(target)
        else:
            os.unlink(target)
    except OSError:
        pass


def _vanish_for_test(path: str) -> None:
    """Test only (PCOMPILE_TEST_VANISH names `path`): remove it now, after its directory was listed
    and before it is mounted, which is the race another process's temp dir makes in a busy /tmp."""
    from pcompile.settings import TEST_VANISH

    if path in (TEST_VANISH.get() or "").split(os.pathsep):
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        else:
            os.unlink(path)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2); raises OSError with the target named."""
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    if _libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype or 'bind'} {source} on {target}: {os.strerror(err)}")


@dataclass
class Mount:
    path: str
    fstype: str
    readonly: bool


def _unescape(s: str) -> str:
    return s.encode().decode("unicode_escape").encode("latin-1").decode("utf-8", "replace") if "\\" in s else s


def host_mounts(text: str | None = None) -> dict[str, Mount]:
    """Visible mounts by mount point, from /proc/self/mountinfo (a mount hidden by a later one at
    the same point is dropped)."""
    text = Path("/proc/self/mountinfo").read_text() if text is None else text
    out: dict[str, Mount] = {}
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        f = left.split()
        if len(f) < 6 or not right:
            continue
        point = _unescape(f[4])
        out[point] = Mount(point, right.split()[0], "ro" in f[5].split(","))
    return out


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@dataclass
class View:
    """Builds the view under `merged`; records what it did for the report."""

    run: Path
    merged: Path
    privileged: bool
    mounts: dict[str, Mount]
    uppers: dict[str, str] = field(default_factory=dict)  # original path -> its upper dir
    readonly: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    scaffolds: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    sockets: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)  # listed, then gone before it could be mounted
    _n: int = 0

    def at(self, path: str) -> str:
        return str(self.merged) + (path if path != "/" else "")

    def _governing(self, path: str) -> Mount:
        best = max((p for p in self.mounts if _under(path, p)), key=len, default="/")
        return self.mounts.get(best) or Mount("/", "?", False)

    def _below(self, path: str) -> list[str]:
        return [p for p in self.mounts if p != path and _under(p, path)]

    def _passthrough(self, m: Mount | None, path: str) -> bool:
        return any(_under(path, r) for r in PASS_ROOTS) or (m is not None and m.fstype in PSEUDO)

    # ------------------------------------------------------------------ the primitives
    def overlay(self, path: str) -> None:
        """Copy-on-write view of the real directory `path` (a lower with no mount below, or, as root, a mount)."""
        self._n += 1
        upper = self.run / "files" / path.lstrip("/") if not any(_under(path, u) for u in self.uppers) else \
            self.run / "mounts" / str(self._n)
        work = self.run / "work" / str(self._n)
        upper.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        opts = f"lowerdir={_esc(path)},upperdir={_esc(str(upper))},workdir={_esc(str(work))}"
        if self.privileged:
            extra = [",redirect_dir=on", ""]
        else:
            extra = [",userxattr", ""]
        last: OSError | None = None
        for e in extra:
            try:
                mount("overlay", self.at(path), "overlay", 0, opts + e)
                self.uppers[path] = str(upper)
                return
            except OSError as exc:
                last = exc
        self.failed.append(f"{path} ({last.strerror if last else '?'})")
        self.bind(path, readonly=True)

    def bind(self, path: str, readonly: bool = False, recursive: bool = False) -> None:
        target = self.at(path)
        flags = MS_BIND | (MS_REC if recursive else 0)
        try:
            mount(path, target, None, flags)
        except OSError as exc:
            if recursive or exc.errno != errno.EINVAL:
                raise
            mount(path, target, None, flags | MS_REC)  # locked submounts (user namespace): bind them too
        if readonly:
            try:
                mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | self._locked_flags(path))
            except OSError as exc:
                if not os.statvfs(target).f_flag & os.ST_RDONLY:  # never leave the real file writable
                    _libc.umount2(os.fsencode(target), 2)  # MNT_DETACH
                    self.failed.append(f"{path} (left out: {exc.strerror})")
                    return
            self.readonly.append(path)
        else:
            self.passed.append(path)

    def _locked_flags(self, path: str) -> int:
        """nosuid/nodev/noexec and atime flags, which a user namespace may not change on a remount."""
        st = os.statvfs(path)
        pairs = ((MS_NOSUID, os.ST_NOSUID), (MS_NODEV, os.ST_NODEV), (MS_NOEXEC, os.ST_NOEXEC),
                 (1024, os.ST_NOATIME), (2048, os.ST_NODIRATIME), (1 << 21, os.ST_RELATIME))
        return sum(bit for bit, vf in pairs if st.f_flag & vf)

    # ------------------------------------------------------------------ the walk
    def place(self, path: str) -> None:
        """Put the real `path` (a directory or a mounted file) at the same path under `merged`."""
        m = self.mounts.get(path)
        if self._passthrough(m, path):
            self.bind(path, recursive=True)
            return
        gov = m or self._governing(path)
        if not os.path.isdir(path) or os.path.islink(path):
            self.bind(path, readonly=True)  # a file mount: never copy-on-write, never written
            return
        below = self._below(path)
        if gov.readonly and not below:
            self.bind(path, readonly=True)
            return
        if not below:
            self.overlay(path)
            return
        if self.privileged and m is not None:
            if gov.readonly:
                self.bind(path, readonly=True)
            else:
                self.overlay(path)
            for child in sorted(c for c in below if not any(o != c and _under(c, o) for o in below)):
                if os.path.lexists(child):
                    self.place(child)
            return
        self.scaffold(path)

    def scaffold(self, path: str) -> None:
        """A directory with mounts below it (user namespace): rebuilt entry by entry on the tmpfs."""
        target = self.at(path)
        st = os.stat(path)
        os.makedirs(target, exist_ok=True)
        os.chmod(target, stat.S_IMODE(st.st_mode))
        self.scaffolds.append(path)
        with os.scandir(path) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            child = os.path.join(path, e.name)
            _vanish_for_test(child)
            failed = len(self.failed)
            try:
                self._scaffold_entry(e, child)
            except FileNotFoundError:
                if os.path.lexists(child):
                    raise
                # gone since the listing (another process's temp dir, a multiprocessing pymp-*):
                # it is gone for real too, so it is left out of the view
                del self.failed[failed:]
                self.vanished.append(child)
                _remove_placeholder(self.at(child))

    def _scaffold_entry(self, e: os.DirEntry[str], child: str) -> None:
        if e.is_symlink() and child not in self.mounts:
            os.symlink(os.readlink(child), self.at(child))
            return
        is_dir = e.is_dir(follow_symlinks=False)
        if is_dir:
            os.makedirs(self.at(child), exist_ok=True)
        else:
            open(self.at(child), "ab").close()
        if child in self.mounts or self._below(child):
            self.place(child)
        elif is_dir:
            (self.bind(child, readonly=True) if self._governing(child).readonly else self.overlay(child))
        elif e.is_file(follow_symlinks=False):
            self.bind(child, readonly=True)
        # sockets, fifos, devices directly in such a directory: left out of the view

    def pass_sockets(self, roots: tuple[str, ...] = SOCKET_ROOTS, depth: int = 6, budget: int = 200_000) -> None:
        """Bind every Unix socket that exists now under the runtime dirs to its real inode.

        A socket seen through an overlay is a copy of its inode, not the listening socket, so
        connect() is refused (a Ray raylet, a database, an X server started before the warm); a
        bind mount of the socket file itself reaches the real one. Breadth first, so the shallow
        session dirs where programs keep sockets are reached before a deep tree (a test run's
        tmp dirs) spends the budget; only entries that are neither file, dir nor link are
        stat()ed. Sockets made later by other processes are not covered."""
        from collections import deque

        seen = 0
        queue = deque((os.path.realpath(r), 0) for r in dict.fromkeys(r for r in roots if r and os.path.isdir(r)))
        while queue and seen < budget:
            path, level = queue.popleft()
            if self._passthrough(self.mounts.get(path), path) or _under(path, str(self.run)):
                continue  # (the run dir holds the view itself)
            try:
                with os.scandir(path) as it:
                    entries = list(it)
            except OSError:
                continue
            for e in entries:
                seen += 1
                try:
                    if e.is_dir(follow_symlinks=False):
                        if level + 1 < depth:
                            queue.append((e.path, level + 1))
                    elif not (e.is_file(follow_symlinks=False) or e.is_symlink()) and \
                            stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode):
                        _vanish_for_test(e.path)
                        self._bind_socket(e.path)
                except OSError:
                    continue

    def _bind_socket(self, path: str) -> None:
        target = self.at(path)
        placed = False
        try:
            if not os.path.lexists(target):
                open(target, "ab").close()  # a scaffold leaves sockets out: a mount point for it
                placed = True
            mount(path, target, None, MS_BIND)
            self.sockets.append(path)
        except FileNotFoundError:
            self.vanished.append(path)  # closed since the walk saw it: nothing to reach
            if placed:
                _remove_placeholder(target)  # gone for real: no empty file in its place
        except OSError as exc:
            self.failed.append(f"{path} (socket not reachable: {exc.strerror})")

    def record(self) -> dict[str, object]:
        return {"sockets": self.sockets, "uppers": self.uppers, "readonly": self.readonly, "passed": self.passed, "scaffolds": self.scaffolds,
                "failed": self.failed, "vanished": self.vanished}


def _esc(path: str) -> str:
    """overlay option values: ',' ':' and '\\' escaped."""
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def build(run: Path, keep: list[str], privileged: bool) -> View:
    """Mount the whole view under `<run>/.root` (in this process's private mount namespace)."""
    merged = run / ".root"
    merged.mkdir(parents=True, exist_ok=True)
    view = View(run, merged, privileged, host_mounts())
    view.privileged = privileged and "/" in view.mounts
    if privileged and "/" in view.mounts:
        view.place("/")
    else:
        mount("pcompile-warm", str(merged), "tmpfs", 0, "mode=0755")
        view.scaffold("/")
    view.pass_sockets()
    for path in sorted({os.path.realpath(k) for k in keep if k and os.path.isdir(k)}, key=len):
        view.bind(path)  # pcompile's cache dirs, the run dir, the warm's work dir: real, read-write
    for path in sorted({os.path.realpath(k) for k in keep if k and os.path.isfile(k)}):
        target = Path(view.at(path))  # an output file pcompile writes (settings.outputs): real too
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
        view.bind(path)
    return view


def link_record(run: Path, uppers: dict[str, str]) -> None:
    """After the warm: `<run>/files/<path>` names every upper, also those kept under mounts/<n>."""
    files = run / "files"
    for path, upper in uppers.items():
        want = files / path.lstrip("/")
        if Path(upper) != want and not os.path.lexists(want):
            want.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(upper, want.parent), want)


def written(run: Path, uppers: dict[str, str], limit: int = 50) -> tuple[list[str], list[str], int, int]:
    """(written paths, deleted paths, n written, n deleted) from the uppers: overlay marks a
    deletion with a 0:0 character device."""
    wrote: list[str] = []
    gone: list[str] = []
    nw = nd = 0
    for path, upper in uppers.items():
        for root, dirs, files in os.walk(upper):
            for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
                full = os.path.join(root, name)
                orig = os.path.join(path, os.path.relpath(full, upper))
                if orig in uppers:
                    continue  # link_record's own link to a nested mount's upper
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                    nd += 1
                    if len(gone) < limit:
                        gone.append(orig)
                else:
                    nw += 1
                    if len(wrote) < limit:
                        wrote.append(orig)
    return sorted(wrote), sorted(gone), nw, nd


def save(view: View, where: Path) -> None:
    where.write_text(json.dumps(view.record()))
