"""torch CUDA tensors through crescent (docs/gpu.md). Skipped without a GPU.

Engine: CUDA tensors registered by data_ptr() (location "*": detected as
device memory) move device<->device and device<->host between two engines,
with "auto" (CUDA paths) and "tcp" (pinned staging). Store: put_tensor of a
CUDA tensor, get_tensor_into_cuda / batch_get_tensor_into_cuda, and the
zero-copy put_from / get_into on a registered CUDA buffer.
"""
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)

import crescent  # noqa: E402

MiB = 1 << 20


def _pattern(n, seed, device):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g).to(device)


@pytest.mark.parametrize("protocol", ["auto", "tcp"])
def test_engine_cuda_tensors(protocol):
    n = 3 * MiB + 12345
    with crescent.Engine(protocol=protocol) as a, crescent.Engine(protocol=protocol) as b:
        src = _pattern(n, 1, "cuda")
        dst = torch.zeros(n, dtype=torch.uint8, device="cuda")
        host = torch.zeros(n, dtype=torch.uint8)
        a.register(src.data_ptr(), n)
        a.register(host.data_ptr(), n)
        b.register(dst.data_ptr(), n)
        seg = a.open_segment(b.segment_name)
        a.transfer_sync(crescent.OP_WRITE, src.data_ptr(), seg, dst.data_ptr(), n)
        torch.cuda.synchronize()
        assert torch.equal(src, dst)
        dst.copy_(_pattern(n, 2, "cuda"))
        torch.cuda.synchronize()
        a.transfer_sync(crescent.OP_READ, host.data_ptr(), seg, dst.data_ptr(), n)
        assert torch.equal(host, dst.cpu())
        for addr in (src.data_ptr(), host.data_ptr()):
            a.unregister(addr)
        b.unregister(dst.data_ptr())


def test_store_cuda_tensors(store):
    t = torch.arange(4096, dtype=torch.float32, device="cuda").reshape(64, 64)
    assert store.put_tensor("gpu/t", t) == 0
    back = store.get_tensor("gpu/t")
    assert torch.equal(back, t.cpu())
    out = torch.empty_like(t)
    assert store.get_tensor_into_cuda("gpu/t", out) == t.numel() * 4
    assert torch.equal(out, t)
    outs = [torch.empty_like(t), torch.empty(3, device="cuda")]
    assert store.batch_get_tensor_into_cuda(["gpu/t", "gpu/t"], outs) == [t.numel() * 4, -600]
    assert torch.equal(outs[0], t)
    # zero-copy: a registered CUDA buffer is a source and a destination
    buf = _pattern(2 * MiB, 3, "cuda")
    assert store.register_buffer(buf.data_ptr(), buf.numel()) == 0
    assert store.put_from("gpu/raw", buf.data_ptr(), MiB) == 0
    assert store.get_into("gpu/raw", buf.data_ptr() + MiB, MiB) == MiB
    torch.cuda.synchronize()
    assert torch.equal(buf[:MiB], buf[MiB:])
    assert store.unregister_buffer(buf.data_ptr()) == 0
