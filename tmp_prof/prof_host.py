import cProfile, os, pstats, sys, io, time
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
import torch, torch.distributed as dist
sys.path.insert(0, os.getcwd())
import iris
lr = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(lr)
dist.init_process_group("nccl", device_id=torch.device("cuda", lr))
ctx = iris.iris("2GiB", backend="cuda")
m, n, k = 2048, 8192, 4096
A = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); B = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
out = ctx.zeros(m, n, dtype=torch.bfloat16)
f = lambda: ctx.ops.matmul_all_reduce(out, A, B)
for _ in range(5): f()
torch.cuda.synchronize(); ctx.barrier()
def host(fn, n=30):
    s=[]
    for _ in range(n):
        torch.cuda.synchronize(); t=time.perf_counter(); fn(); s.append(time.perf_counter()-t)
    torch.cuda.synchronize(); s.sort(); return s[len(s)//2]*1e6
print(lr, "host us", host(f))
pr = cProfile.Profile(); pr.enable()
for _ in range(30):
    f(); torch.cuda.synchronize()
pr.disable()
if lr == 0:
    st = io.StringIO(); pstats.Stats(pr, stream=st).sort_stats("tottime").print_stats(25); print(st.getvalue())
    st = io.StringIO(); pstats.Stats(pr, stream=st).sort_stats("cumtime").print_stats(30); print(st.getvalue())
ctx.barrier(); dist.destroy_process_group()
