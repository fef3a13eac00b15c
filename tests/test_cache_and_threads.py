"""The Numba cache verifies what it loads, and first calls from several threads or processes
all succeed.

- A module file in the cache never runs: the source dt generated (in memory) does, and a file
  that differs from it (planted, truncated) is rewritten; a planted `.pyc` is never used.
- The cache directory and its `__pycache__` are created private and checked before use; one
  another user could write to (or a symbolic link) is refused with a DTCacheWarning, and the
  program runs from a private temporary directory.
- A corrupted Numba index or data file is compiled again and rewritten, never fatal.
- Threads calling one Program for the first time, on every backend, and processes compiling
  one program into one fresh cache directory, all get the right answer.

Every test uses a program of its own name, so no module compiled by another test of this
process stands in for the one under test, and a fresh DT_CACHE_DIR.
"""
from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import stat
import subprocess
import sys
import threading

import numpy as np
import pytest

import dt
from dt import backends

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
    text = next(str(w.message) for w in caught if issubclass(w.category, DTCacheWarning))
    assert str(directory) in text and reason in text and "temporary directory" in text, text
    assert "To fix" in text, text
    return text


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
    if os.geteuid() == 0:
        os.chown(cache, 65534, 65534)
    else:  # only root can give a directory away: pretend to be someone else
        me = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: me + 1)
    owner = os.stat(cache).st_uid
    _refused(prog, cache, f"owned by user {owner}")


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


@needs_numba
def test_a_directory_that_cannot_be_written_is_left_for_a_temporary_one(cache, monkeypatch):
    """A read-only file system (simulated: root ignores permission bits)."""
    from dt.backends.numba_cpu import cache as numba_cache
    write = numba_cache._write_atomically

    def read_only_cache(path, data):
        if path.parent == cache:
            raise OSError(30, "Read-only file system")
        write(path, data)

    prog = _program("read_only")
    monkeypatch.setattr(numba_cache, "_write_atomically", read_only_cache)
    _refused(prog, cache, "cannot be written there (Read-only file system)")
    assert not _module_path(prog).exists()


# ---------------------------------------------------------------- numba's own files
PROBE = """
import json, sys
import numpy as np
import dt
from dt import backends
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
    start = threading.Barrier(8)
    results, errors = [], []

    def first_call():
        start.wait()
        try:
            results.append(prog(A=INPUT, backend=backend))
        except Exception as e:  # collected: an exception in a thread would not fail the test
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 8 and all(np.array_equal(r, EXPECTED) for r in results)


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
start, errors = threading.Barrier(8), []

def first_call():
    start.wait()
    try:
        assert np.array_equal(prog(A=a, backend=sys.argv[2]), np.maximum(a, 0))
    except Exception as e:
        errors.append(f"{type(e).__name__}: {e}")

threads = [threading.Thread(target=first_call) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(errors)
"""


def test_threads_first_naming_a_plugin_backend_all_find_it():
    """The registry reads the entry points on the first call in a process: threads that came
    while another read them found no plugin backend."""
    from importlib.metadata import entry_points
    plugins = [ep.name for ep in entry_points(group="dt.backends")]
    if not plugins:
        pytest.skip("no backend plugin is installed (pip install -e conformance/example_backend)")
    if not backends.available(plugins[0]):
        pytest.skip(f"the {plugins[0]} backend is not available: {backends.failures().get(plugins[0])}")
    run = subprocess.run([sys.executable, "-c", FIRST_CALLS, RELU, plugins[0]], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[]"
