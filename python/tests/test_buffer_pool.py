"""mooncake.buffer_pool.BufferPool: leases of a registered region, first-fit
with coalescing, the buffer protocol, zero-copy store calls through leases,
overflow regions and their limits, blocking / timeout, threads, close."""

import threading
import time

import numpy as np
import pytest

import crescent
from mooncake.buffer_pool import BufferLease, BufferPool

KiB = 1 << 10
MiB = 1 << 20


def test_leases_are_registered_buffers(store):
    with BufferPool(store, capacity=1 * MiB) as pool:
        assert pool.capacity == 1 * MiB and pool.base % (2 * MiB) == 0
        lease = pool.acquire(1000)
        assert isinstance(lease, BufferLease) and not lease.is_overflow
        assert lease.size == len(lease) == 1000 and lease.ptr == pool.base
        # Buffer protocol.
        raw = memoryview(lease)
        assert raw.nbytes == 1000 and not raw.readonly
        mv = lease.memoryview()
        assert mv.format == "B" and mv.nbytes == 1000
        mv[:5] = b"hello"
        assert bytes(lease[:5]) == b"hello"
        arr = np.frombuffer(lease, np.uint8)
        arr[5:8] = np.frombuffer(b" wo", np.uint8)
        lease[8:11] = b"rld"
        # Zero-copy store calls from / into the lease (registered memory).
        assert store.put_from("bp/1", lease.ptr, 11) == 0
        assert store.get("bp/1") == b"hello world"
        with pool.acquire(64) as other:
            assert other.ptr == pool.base + 1024  # 1000 rounded up to the 64-byte alignment
            assert store.get_into("bp/1", other, 64) == 11  # the lease stands in for a pointer
            assert bytes(other)[:11] == b"hello world"
            assert store.put("bp/2", other) == 0  # and for a buffer
        assert other.released
        lease.release()
        lease.release()  # idempotent
        st = pool.stats()
        assert st["used"] == 0 and st["leases"] == 0 and st["largest_free"] == 1 * MiB
    assert pool.closed


def test_first_fit_and_coalescing(store):
    pool = BufferPool(store, capacity=64 * KiB, alignment=4096, max_regions=0)
    leases = [pool.acquire(4096) for _ in range(16)]
    assert [x.ptr - pool.base for x in leases] == [i * 4096 for i in range(16)]
    assert pool.try_acquire(1) is None  # full, no overflow allowed
    for i in (3, 4, 5, 9):
        leases[i].release()
    assert pool.stats()["largest_free"] == 3 * 4096  # 3..5 merged
    x = pool.acquire(8000)  # first fit: the merged hole at 3
    assert x.ptr == pool.base + 3 * 4096
    y = pool.acquire(100)  # next hole: 5
    assert y.ptr == pool.base + 5 * 4096
    z = pool.acquire(4096)
    assert z.ptr == pool.base + 9 * 4096
    for lease in leases[:3] + leases[6:9] + leases[10:] + [x, y, z]:
        lease.release()
    st = pool.stats()
    assert st["free"] == st["largest_free"] == 64 * KiB  # everything merged back
    assert pool.acquire(64 * KiB).ptr == pool.base
    pool.close()


def test_overflow_and_limits(store):
    pool = BufferPool(store, capacity=64 * KiB, max_regions=2, max_bytes=64 * KiB + 3 * MiB)
    big = pool.acquire(1 * MiB)  # larger than the pool: a temporary region
    assert big.is_overflow and big.size == 1 * MiB
    big.memoryview()[:3] = b"big"
    assert store.put_from("bp/big", big.ptr, 1 * MiB) == 0  # it is registered
    assert store.get_size("bp/big") == 1 * MiB
    full = pool.acquire(64 * KiB)  # fills the pool
    assert not full.is_overflow
    small = pool.acquire(100)  # pool full: overflow too
    assert small.is_overflow
    st = pool.stats()
    assert st["overflow_regions"] == 2 and st["overflow_bytes"] == 1 * MiB + 100
    # max_regions reached: no third overflow region.
    assert pool.try_acquire(10) is None
    with pytest.raises(TimeoutError):
        pool.acquire(10, timeout=0.05)
    small.release()
    # max_bytes: 64 KiB + 1 MiB + 2.5 MiB > limit.
    assert pool.try_acquire(int(2.5 * MiB)) is None
    mid = pool.acquire(2 * MiB)
    assert mid.is_overflow
    big.release()
    mid.release()
    assert pool.stats()["overflow_regions"] == 0
    # Never satisfiable: above both the pool and the overflow allowance.
    with pytest.raises(ValueError):
        pool.acquire(4 * MiB)
    full.release()
    pool.close()
    # No overflow at all.
    strict = BufferPool(store, capacity=64 * KiB, max_regions=0)
    with pytest.raises(ValueError):
        strict.acquire(64 * KiB + 1)
    strict.close()


def test_blocking_acquire_and_timeout(store):
    pool = BufferPool(store, capacity=64 * KiB, max_regions=0)
    held = pool.acquire(64 * KiB)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        pool.acquire(1, timeout=0.1)
    assert 0.09 <= time.monotonic() - t0 < 2
    got = []

    def waiter():
        with pool.acquire(32 * KiB) as lease:  # blocks until the release below
            got.append(lease.ptr)

    th = threading.Thread(target=waiter)
    th.start()
    time.sleep(0.1)
    assert got == []
    held.release()
    th.join(5)
    assert got == [pool.base]
    pool.close()


def test_threads_share_a_pool(store):
    pool = BufferPool(store, capacity=256 * KiB, max_regions=2, max_bytes=256 * KiB + 256 * KiB)
    errors = []
    overflowed = []

    def worker(tid):
        try:
            for i in range(40):
                n = 1 + (tid * 7919 + i * 104729) % (48 * KiB)
                with pool.acquire(n, timeout=10) as lease:
                    if lease.is_overflow:
                        overflowed.append(n)
                    mv = lease.memoryview()
                    stamp = bytes([tid]) * n
                    mv[:] = stamp
                    key = f"bp/t{tid}/{i}"
                    if i % 8 == 0:  # some go through the store
                        assert store.put_from(key, lease.ptr, n) == 0
                        assert store.get(key) == stamp
                    time.sleep(0.0005)
                    assert bytes(mv) == stamp, "another thread wrote into this lease"
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    st = pool.stats()
    assert st["leases"] == 0 and st["used"] == 0 and st["overflow_regions"] == 0
    assert st["largest_free"] == 256 * KiB
    pool.close()


def test_close(store):
    pool = BufferPool(store, capacity=64 * KiB, max_regions=0)
    lease = pool.acquire(64 * KiB)
    errs = []

    def waiter():
        try:
            pool.acquire(10)
        except RuntimeError as e:
            errs.append(str(e))

    th = threading.Thread(target=waiter)
    th.start()
    time.sleep(0.05)
    pool.close()  # wakes the waiter; the region stays while the lease is out
    th.join(5)
    assert errs and "closed" in errs[0]
    lease.memoryview()[:4] = b"live"
    assert store.put_from("bp/closing", lease.ptr, 4) == 0  # still registered
    with pytest.raises(RuntimeError):
        pool.acquire(1)
    lease.release()  # last lease: unregistered and freed now
    pool.close()
    assert store.put_from("bp/after", pool.base, 4) < 0
    # Unregistered right away when nothing is leased.
    p2 = BufferPool(store, capacity=64 * KiB)
    base = p2.base
    p2.close()
    assert store.unregister_buffer(base) < 0


def test_bad_arguments(store):
    with pytest.raises(TypeError):
        BufferPool(store, capacity="1MB")
    with pytest.raises(ValueError):
        BufferPool(store, capacity=0)
    with pytest.raises(ValueError):
        BufferPool(store, capacity=4096, alignment=3)
    with pytest.raises(ValueError):
        BufferPool(store, capacity=4096, max_regions=-1)
    with pytest.raises(ValueError):
        BufferPool(store, capacity=8192, max_bytes=4096)
    with pytest.raises(TypeError):
        BufferPool(None)
    pool = BufferPool(store, capacity=4096)
    for bad in (None, "1", 1.5, True):
        with pytest.raises(TypeError):
            pool.acquire(bad)
    for bad in (0, -1):
        with pytest.raises(ValueError):
            pool.acquire(bad)
    with pytest.raises(ValueError):
        pool.acquire(1, timeout=-1)
    with pytest.raises(TypeError):
        pool.acquire(1, timeout="1")
    with pytest.raises(TypeError):
        pool.release(b"not a lease")
    other = BufferPool(store, capacity=4096)
    lease = other.acquire(10)
    with pytest.raises(ValueError):
        pool.release(lease)
    lease.release()
    other.close()
    pool.close()


def test_store_registration_failure_is_reported():
    class Refusing:
        def register_buffer(self, ptr, size):
            return -600

        def unregister_buffer(self, ptr):
            return 0

    with pytest.raises(RuntimeError):
        BufferPool(Refusing(), capacity=4096)
    # The overflow path reports it too, and the pool stays usable.
    class Once(Refusing):
        calls = 0

        def register_buffer(self, ptr, size):
            Once.calls += 1
            return 0 if Once.calls == 1 else -600

    pool = BufferPool(Once(), capacity=4096)
    with pytest.raises(RuntimeError):
        pool.acquire(8192)
    assert pool.stats()["overflow_regions"] == 0
    with pool.acquire(4096) as lease:
        assert lease.size == 4096
    pool.close()
    assert crescent.alloc_shared  # the allocator the pool uses
