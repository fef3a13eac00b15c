"""The Numba cache verifies what it loads, and first calls from several threads or processes
all succeed.

- A module file in the cache never runs: the source dt generated (in memory) does, and a file
  that differs from it (planted, truncated) is rewritten; a planted `.pyc` is never used.
- The cache directory and its `__pycache__` are created private and checked before use; one
  another user could write to (or a symbolic link) is refused with a DTCacheWarning, and the
  program runs from a private temporary directory. So is one below a directory another user
  could rename it in (symbolic links on the way followed); a sticky one (/tmp) is fine.
- Long program and function names fit in file names; a module that cannot be written even in
  the temporary directory is a DTBackendError, and the warning's advice fits the error.
- A corrupted Numba index or data file is compiled again and rewritten, never fatal.
- Threads calling one Program for the first time, on every backend, and processes compiling
  one program into one fresh cache directory, all get the right answer.

Every test uses a program of its own name, so no module compiled by another test of this
process stands in for the one under test, and a fresh DT_CACHE_DIR.
"""
from __future__ import annotations

import errno
import importlib.util
import inspect
import json
import os
import py_compile
import stat
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest

import dt
from dt import backends
from dt.errors import DTBackendError

RELU = """Func relu_out;
In A;
Var x, y;
relu_out[x, y] = maximum(0, A[x, y]);
relu_out.block(x:1, y:128);
relu_out.tensorize(y:128);
relu_out.compile();
"""
INPUT = np.random.default_rng(0).standard_normal((3, 300)).astype(np.float32)
EXPECTED = np.maximum(INPUT, 0)

needs_numba = pytest.mark.skipif(not backends.available("numba"),
                                 reason=f"the numba backend is not available: {backends.failures().get('numba')}")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh DT_CACHE_DIR; the Numba cache directory inside it (not created yet)."""
    monkeypatch.setenv("DT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "numba"


def _program(tag: str):
    return dt.loads(RELU, name=f"cache_test_{tag}")


def _module_path(prog):
    from dt.backends.numba_cpu import module_path
    return module_path(prog.source("numba"), prog.pipeline("f32").name)


def _private(path) -> bool:
    return stat.S_IMODE(os.lstat(path).st_mode) & 0o077 == 0


# ---------------------------------------------------------------- module files are verified
@needs_numba
def test_a_planted_module_does_not_run_and_is_replaced(cache, tmp_path):
    prog = _program("planted")
    path = _module_path(prog)
    marker = tmp_path / "pwned"
    cache.mkdir(parents=True, mode=0o700)
    path.write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    assert np.array_equal(prog(A=INPUT, backend="numba"), EXPECTED)
    assert not marker.exists()
    assert path.read_text() == prog.source("numba")


@needs_numba
def test_a_planted_pyc_does_not_run(cache, tmp_path):
    """Python's own import would run a .pyc whose header matches the .py's time and size."""
    prog = _program("planted_pyc")
    path, source = _module_path(prog), prog.source("numba").encode()
    marker = tmp_path / "pwned"
    evil = f"open({str(marker)!r}, 'w').write('pwned')\n".encode()
    cache.mkdir(parents=True, mode=0o700)
    path.write_bytes(evil + b"#" * (len(source) - len(evil) - 1) + b"\n")
    pyc = importlib.util.cache_from_source(str(path))
    os.makedirs(os.path.dirname(pyc), mode=0o700)
    py_compile.compile(str(path), cfile=pyc, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    st = path.stat()
    path.write_bytes(source)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert np.array_equal(prog(A=INPUT, backend="numba"), EXPECTED)
    assert not marker.exists()


@needs_numba
def test_a_truncated_module_is_rebuilt(cache):
    prog = _program("truncated")
    path, source = _module_path(prog), prog.source("numba")
    cache.mkdir(parents=True, mode=0o700)
    path.write_text(source[:len(source) // 2])
    assert np.array_equal(prog(A=INPUT, backend="numba"), EXPECTED)
    assert path.read_text() == source
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]  # no temporary file left


# ---------------------------------------------------------------- the directory is checked
@needs_numba
def test_the_cache_directory_is_created_private(cache):
    prog = _program("private")
    assert np.array_equal(prog(A=INPUT, backend="numba"), EXPECTED)
    assert _module_path(prog).exists()
    assert _private(cache) and _private(cache / "__pycache__")
    assert list((cache / "__pycache__").glob("*.nbi"))  # numba's machine code sits beside the module


def _refused(prog, directory, reason: str):
    """Call `prog` expecting a DTCacheWarning that names `directory`, the reason and a fix."""
    from dt.backends.numba_cpu import DTCacheWarning
    with pytest.warns(DTCacheWarning) as caught:
        out = prog(A=INPUT, backend="numba")
    assert np.array_equal(out, EXPECTED)
    warning = next(w for w in caught if issubclass(w.category, DTCacheWarning))
    text = str(warning.message)
    assert str(directory) in text and reason in text and "temporary directory" in text, text
    assert "To fix" in text, text
    assert text.startswith("the Numba cache directory"), text  # the CLI adds `dt: warning: `
    assert warning.filename == __file__  # the user's call, not a line inside dt
    return text


def _accepted(prog, directory):
    """Call `prog` expecting no DTCacheWarning and its module in `directory`."""
    from dt.backends.numba_cpu import DTCacheWarning
    with warnings.catch_warnings():
        warnings.simplefilter("error", DTCacheWarning)
        assert np.array_equal(prog(A=INPUT, backend="numba"), EXPECTED)
    assert (directory / _module_path(prog).name).exists()


def _owned_by_another_user(monkeypatch, path, uid=12345):
    """Give `path` (a directory or a symbolic link) to user `uid`: really as root, else by
    making os.lstat and os.stat say so."""
    if os.geteuid() == 0:
        os.lchown(path, uid, uid)
        return
    for name in ("lstat", "stat"):
        real = getattr(os, name)

        def fake(p, *args, real=real, **kwargs):
            st = real(p, *args, **kwargs)
            if os.fspath(p) != str(path):
                return st
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, uid, uid, st.st_size,
                                   int(st.st_atime), int(st.st_mtime), int(st.st_ctime)))

        monkeypatch.setattr(os, name, fake)


@needs_numba
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702], ids=oct)
def test_a_directory_others_can_write_is_refused(cache, mode):
    prog = _program(f"writable_{mode:o}")
    cache.mkdir(parents=True)
    cache.chmod(mode)
    text = _refused(prog, cache, "other users can write to it")
    assert "chmod go-w" in text
    assert not list(cache.iterdir())  # nothing is written to a refused directory


@needs_numba
def test_a_directory_of_another_user_is_refused(cache, monkeypatch):
    prog = _program("foreign")
    cache.mkdir(parents=True, mode=0o700)
    _owned_by_another_user(monkeypatch, cache)
    _refused(prog, cache, "it is owned by user 12345")


@needs_numba
def test_a_symbolic_link_is_refused(cache, tmp_path):
    prog = _program("symlink")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    cache.parent.mkdir()
    cache.symlink_to(elsewhere)
    _refused(prog, cache, "symbolic link")
    assert not list(elsewhere.iterdir())


@needs_numba
def test_a_writable_pycache_is_refused(cache):
    prog = _program("writable_pycache")
    (cache / "__pycache__").mkdir(parents=True, mode=0o700)
    cache.chmod(0o700)
    (cache / "__pycache__").chmod(0o777)
    _refused(prog, cache / "__pycache__", "other users can write to it")


def _failing_writes(monkeypatch, failing, error: OSError):
    """Make writing a module fail with `error` in the directories for which `failing` is true."""
    from dt.backends.numba_cpu import cache as numba_cache
    write = numba_cache._write_atomically

    def write_or_fail(path, data):
        if failing(path.parent):
            raise error
        write(path, data)

    monkeypatch.setattr(numba_cache, "_write_atomically", write_or_fail)


@needs_numba
def test_a_directory_that_cannot_be_written_is_left_for_a_temporary_one(cache, monkeypatch):
    """A read-only file system (simulated: root ignores permission bits)."""
    prog = _program("read_only")
    _failing_writes(monkeypatch, lambda d: d == cache, OSError(errno.EROFS, "Read-only file system"))
    text = _refused(prog, cache, "cannot be written there (Read-only file system)")
    assert "make it writable" in text
    assert not _module_path(prog).exists()


@needs_numba
def test_the_warning_for_a_full_disk_does_not_ask_for_write_permission(cache, monkeypatch):
    prog = _program("full_disk")
    _failing_writes(monkeypatch, lambda d: d == cache, OSError(errno.ENOSPC, "No space left on device"))
    text = _refused(prog, cache, "cannot be written there (No space left on device)")
    assert "make it writable" not in text and f"free some space in {cache}" in text


@needs_numba
def test_a_module_that_cannot_be_written_even_in_the_temporary_directory_is_a_dt_error(cache, monkeypatch):
    from dt.backends.numba_cpu import DTCacheWarning
    prog = _program("nowhere")
    _failing_writes(monkeypatch, lambda d: True, OSError(errno.ENOSPC, "No space left on device"))
    with pytest.warns(DTCacheWarning, match="No space left"), pytest.raises(DTBackendError) as caught:
        prog(A=INPUT, backend="numba")
    message = str(caught.value)
    assert "cannot write the program's module" in message and "No space left on device" in message, message
    assert "hint: free some space in" in message and "TMPDIR" in message, message


# ---------------------------------------------------------------- long names
@needs_numba
def test_long_program_names_fit_in_file_names_and_stay_apart(cache):
    """A file name holds at most 255 bytes: `dt_<name>_<hash>.py` and its `.tmp` name once
    failed with `File name too long` (in the cache, then in the temporary directory)."""
    names = ["cache_test_long_" + "a" * 300, "cache_test_long_" + "a" * 299 + "b", "cache_test_long_" + "é" * 200]
    progs = [dt.loads(RELU, name=name) for name in names]
    for prog in progs:
        _accepted(prog, cache)
    paths = [_module_path(prog) for prog in progs]
    assert len(set(paths)) == len(paths)
    for path in paths:
        assert len(path.name.encode()) <= 100 and path.stem.isidentifier() and path.stem in sys.modules


@needs_numba
def test_a_long_function_name_is_cached_too(cache):
    """Numba names a function's files after the module and the function (a Func's kernel)."""
    long = "cache_test_long_func_" + "f" * 240
    prog = dt.loads(RELU.replace("relu_out", long), name="cache_test_long_func")
    _accepted(prog, cache)
    index = [p.name for p in (cache / "__pycache__").glob("*.nbi") if p.name.startswith(_module_path(prog).stem)]
    assert any("cache_test_long_func_fff" in name for name in index), index


# ---------------------------------------------------------------- the directories above the cache
@needs_numba
def test_a_parent_of_another_user_is_refused(tmp_path, monkeypatch):
    """That user could rename the cache directory away after the check and put their own in
    its place, with a Numba index that Numba unpickles."""
    parent = tmp_path / "theirs"
    parent.mkdir(mode=0o755)
    monkeypatch.setenv("DT_CACHE_DIR", str(parent))
    _owned_by_another_user(monkeypatch, parent)
    _refused(_program("foreign_parent"), parent / "numba", f"the directory {parent} above it is owned by user 12345")
    assert not (parent / "numba").exists()


@needs_numba
@pytest.mark.parametrize("mode,refused", [(0o777, True), (0o775, True), (0o1777, False), (0o755, False)],
                         ids=["777", "775", "1777", "755"])
def test_a_parent_others_can_write_is_refused_unless_sticky(tmp_path, monkeypatch, mode, refused):
    """Group write counts too, even where the group is your own (a home directory under umask
    002): see docs/security.md. In a sticky directory (/tmp) no one else can rename ours."""
    parent = tmp_path / "shared"
    parent.mkdir()
    parent.chmod(mode)
    monkeypatch.setenv("DT_CACHE_DIR", str(parent / "dt"))
    prog = _program(f"parent_{mode:o}")
    if refused:
        text = _refused(prog, parent / "dt" / "numba", f"other users can write to the directory {parent} above it")
        assert f"chmod go-w {parent}" in text
        assert not (parent / "dt").exists()
    else:
        _accepted(prog, parent / "dt" / "numba")


@needs_numba
def test_parents_are_checked_where_symbolic_links_lead(tmp_path, monkeypatch):
    """A link is followed as the system follows it (macOS's /tmp is a link to /private/tmp)."""
    shared = tmp_path / "shared"
    (shared / "real").mkdir(parents=True)
    shared.chmod(0o777)
    (tmp_path / "link").symlink_to(shared / "real")
    monkeypatch.setenv("DT_CACHE_DIR", str(tmp_path / "link"))
    _refused(_program("linked_parent"), tmp_path / "link" / "numba", f"the directory {shared} above it")

    shared.chmod(0o755)
    _accepted(_program("linked_parent_ok"), shared / "real" / "numba")


@needs_numba
def test_a_symbolic_link_on_the_way_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    """Its owner can point it elsewhere, even in a sticky directory."""
    sticky, mine = tmp_path / "sticky", tmp_path / "mine"
    sticky.mkdir()
    sticky.chmod(0o1777)
    mine.mkdir(mode=0o700)
    (sticky / "link").symlink_to(mine)
    _owned_by_another_user(monkeypatch, sticky / "link")
    monkeypatch.setenv("DT_CACHE_DIR", str(sticky / "link"))
    _refused(_program("foreign_link"), sticky / "link" / "numba",
             f"the symbolic link {sticky / 'link'} on its path is owned by user 12345")


@needs_numba
def test_missing_parents_are_created_private_whatever_the_umask(tmp_path, monkeypatch):
    """Else a umask of 002 would make them group-writable, and the next check refuse them."""
    monkeypatch.setenv("DT_CACHE_DIR", str(tmp_path / "new" / "deeper"))
    umask = os.umask(0o002)
    try:
        _accepted(_program("umask"), tmp_path / "new" / "deeper" / "numba")
    finally:
        os.umask(umask)
    assert _private(tmp_path / "new") and _private(tmp_path / "new" / "deeper")


# ---------------------------------------------------------------- numba's own files
PROBE = """
import json, sys
import numpy as np
import dt
from dt import backends
from dt.errors import DTBackendError
prog = dt.loads(sys.argv[1], name=sys.argv[2])
a = np.random.default_rng(0).standard_normal((3, 300)).astype(np.float32)
assert np.array_equal(prog(A=a, backend="numba"), np.maximum(a, 0))
module = backends.get("numba").module(prog.pipeline("f32"))
stats = [getattr(module, k.name).stats for k in prog.pipeline("f32").kernels]
print(json.dumps(dict(hits=sum(sum(s.cache_hits.values()) for s in stats),
                      misses=sum(sum(s.cache_misses.values()) for s in stats))))
"""


def _probe(name: str, cache_root) -> subprocess.Popen:
    env = dict(os.environ, DT_CACHE_DIR=str(cache_root))
    return subprocess.Popen([sys.executable, "-c", PROBE, RELU, name], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _result(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return json.loads(out.splitlines()[-1])


@needs_numba
@pytest.mark.slow
@pytest.mark.parametrize("suffix", ["nbi", "nbc"])
def test_corrupted_numba_files_are_compiled_again_and_rewritten(cache, suffix):
    name = f"cache_test_corrupted_{suffix}"
    root = cache.parent
    assert _result(_probe(name, root))["misses"] >= 1
    files = list((cache / "__pycache__").glob(f"*.{suffix}"))
    assert files
    for f in files:
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    assert _result(_probe(name, root))["misses"] >= 1  # runs, compiling again
    rebuilt = _result(_probe(name, root))  # and the next process loads what that one rewrote
    assert rebuilt["misses"] == 0 and rebuilt["hits"] >= 1


@needs_numba
@pytest.mark.slow
def test_processes_compiling_one_program_into_one_cache_all_succeed(cache):
    name = "cache_test_processes"
    processes = [_probe(name, cache.parent) for _ in range(4)]
    for p in processes:
        _result(p)
    assert _result(_probe(name, cache.parent))["misses"] == 0  # what they left loads


# ---------------------------------------------------------------- first calls from threads
@pytest.mark.parametrize("backend", ["numba", "interp",
                                     pytest.param("triton", marks=[pytest.mark.needs_triton, pytest.mark.slow])])
def test_threads_first_calling_one_program_all_succeed(cache, backend):
    if not backends.available(backend):
        pytest.skip(f"the {backend} backend is not available: {backends.failures().get(backend)}")
    prog = _program(f"threads_{backend}")
    results, errors = _in_threads(lambda: prog(A=INPUT, backend=backend))
    assert errors == []
    assert len(results) == 8 and all(np.array_equal(r, EXPECTED) for r in results)


def _in_threads(call, n=8):
    """Run `call` in `n` threads released together: its results, and its errors as text (an
    exception in a thread would not fail the test). Also sent, as source, to a subprocess."""
    start, results, errors = threading.Barrier(n), [], []

    def first_call():
        start.wait()
        try:
            results.append(call())
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=first_call) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


FIRST_CALLS = """
import sys, threading, time
import numpy as np
import dt
import dt.backends as registry
read_entry_points = registry.entry_points


def slow_entry_points(**kwargs):  # widens the window in which the other threads arrive
    time.sleep(0.2)
    return read_entry_points(**kwargs)


registry.entry_points = slow_entry_points
prog = dt.loads(sys.argv[1], name="cache_test_registry")
a = np.random.default_rng(0).standard_normal((3, 300)).astype(np.float32)
results, errors = _in_threads(lambda: prog(A=a, backend=sys.argv[2]))
print(errors if errors else all(np.array_equal(r, np.maximum(a, 0)) for r in results))
"""


def test_threads_first_naming_a_plugin_backend_all_find_it():
    """The registry reads the entry points on the first call in a process: threads that came
    while another read them found no plugin backend."""
    from importlib.metadata import entry_points
    plugins = [ep.name for ep in entry_points(group="dt.backends")]
    if not plugins:
        pytest.skip("no backend plugin is installed (pip install -e dt/conformance/example_backend)")
    if not backends.available(plugins[0]):
        pytest.skip(f"the {plugins[0]} backend is not available: {backends.failures().get(plugins[0])}")
    script = textwrap.dedent(inspect.getsource(_in_threads)) + FIRST_CALLS
    run = subprocess.run([sys.executable, "-c", script, RELU, plugins[0]], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "True"
