"""Copying get/put copy once (src/store/staging.c): with no local buffer at all
(nothing can be staged) Store.get reads straight into the bytes object it
returns and put sends straight from the caller's bytes, from several threads
at once (the allocator takes the GIL for the allocation alone); the engine
counters show the transfers named unregistered memory and none was refused."""

import threading

import pytest

import crescent

MiB = 1 << 20


@pytest.mark.parametrize("protocol", ["tcp", "auto"])
def test_get_and_put_copy_once(master, protocol):
    with crescent.Store(master_address=master, global_segment_size="32MB",
                        local_buffer_size=0, protocol=protocol) as holder, \
            crescent.Store(master_address=master, global_segment_size=0,
                           local_buffer_size=0, protocol=protocol) as s:
        values = {f"co/{protocol}/{i}": bytes((i * 7 + j) & 0xFF for j in range(256)) * (4096 * (i + 1))
                  for i in range(4)}  # 1, 2, 3, 4 MiB
        for k, v in values.items():
            s.put(k, v)
        s.put(f"co/{protocol}/empty", b"")
        errors = []

        def reader(t):
            try:
                for _ in range(3):
                    for k, v in values.items():
                        got = s.get(k)
                        if type(got) is not bytes or got != v:
                            errors.append((t, k, len(got)))
                if s.get(f"co/{protocol}/empty") != b"":
                    errors.append((t, "empty"))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append((t, repr(e)))

        threads = [threading.Thread(target=reader, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        with pytest.raises(crescent.NotFoundError):
            s.get(f"co/{protocol}/missing")
        st = s.engine_stats()
        assert st["unregistered_requests"] >= 4 + 4 * 3 * 4
        assert st["unregistered_refused"] == 0
        holder.remove_all(force=True)
