"""A lost rank under overlap's torch backends: 2 ranks over gloo train a small model with
overlap.torch.ddp (split into pieces, and the step as one graph) and overlap.torch.zero3;
after the first step rank 1 is killed (SIGKILL: its sockets close) or stopped (SIGSTOP: a
silent rank, its sockets open). Rank 0 must end with an error within the process group's
timeout (plus start-up and compile time), not hang; nothing may be left running. Exit 1
otherwise.

    python torch_fault_train.py [--variants split,one-graph,zero3] [--faults kill,stop]
                                [--timeout 10]

Run by //python:torch_fault_test (with PYTHONPATH naming python/ and tools/).
"""

import argparse
import datetime
import multiprocessing
import os
import signal
import sys
import tempfile
import time

import torch
import torch.distributed as dist

MODEL = ("overlap_export.testing.zoo_modules:transformer", "{}", "4x6:int64:11")
STEPS = 50  # far more than run before the fault: rank 0 is in a step when rank 1 goes


def step_function(variant, base, x, target):
    import overlap.torch as overlap_torch
    if variant == "zero3":
        z = overlap_torch.zero3(base, [x], target, loss="ce")
        opt = torch.optim.SGD(z.parameters(), lr=0.05)

        def zero3_step():
            z.step([x], target)
            opt.step()
            opt.zero_grad()
        return zero3_step
    from bench_util import sgd_step
    ddp = torch.nn.parallel.DistributedDataParallel(base, bucket_cap_mb=0.01)
    backend = overlap_torch.ddp("default", backend="aot_eager", split=variant == "split")
    return sgd_step(base, torch.compile(ddp, backend=backend), x, target)


def worker(rank, store, variant, fault, timeout, report):
    from bench_util import model_without_dropout
    from overlap_export import export
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=timeout))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    base = model_without_dropout(*MODEL[:2])
    x = export.parse_input(MODEL[2], rank)
    step = step_function(variant, base, x, export.loss_target("ce", base, [x], rank))
    step()  # compiles; both ranks complete it
    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    start = time.monotonic()
    try:
        for _ in range(STEPS):
            step()
        report.put(("completed", time.monotonic() - start, ""))
    except Exception as e:  # noqa: BLE001 - what the lost rank raises is torch's to choose
        report.put(("error", time.monotonic() - start, f"{type(e).__name__}: {e}"))
    report.close()
    report.join_thread()  # the report is written before the process ends
    os._exit(0)  # not destroy_process_group: its barrier would wait for the lost rank


def run_case(variant, fault, timeout, work):
    ctx = multiprocessing.get_context("spawn")
    report = ctx.Queue()
    store = os.path.join(work, f"{variant}.{fault}.store")
    ranks = [ctx.Process(target=worker, args=(r, store, variant, fault, timeout, report))
             for r in range(2)]
    for p in ranks:
        p.start()
    limit = timeout + 90  # start-up, the first step's compile, then the fault
    try:
        kind, seconds, message = report.get(timeout=limit)
    except Exception:  # noqa: BLE001 - queue.Empty: rank 0 never reported
        kind, seconds, message = "hang", float(limit), f"no report from rank 0 in {limit} s"
    ranks[0].join(10)
    for p in ranks:  # the stopped rank, or anything left: nothing stays behind
        if p.is_alive():
            p.kill()
        p.join()
    left = [p.pid for p in ranks if p.is_alive()]
    ok = kind == "error" and seconds <= timeout + 5 and not left
    first = message.splitlines()[0][:300] if message else ""
    print(f"torch_fault: {variant}, rank 1 {'killed' if fault == 'kill' else 'stopped'}: "
          f"rank 0 {kind} after {seconds:.1f} s (timeout {timeout} s): {first}"
          + ("" if not left else f"; processes left {left}")
          + f": {'ok' if ok else 'FAILED'}", flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="split,one-graph,zero3")
    ap.add_argument("--faults", default="kill,stop")
    ap.add_argument("--timeout", type=int, default=10,
                    help="the process group's timeout, seconds")
    a = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="overlap_torch_fault.") as work:
        for variant in a.variants.split(","):
            for fault in a.faults.split(","):
                failed += not run_case(variant, fault, a.timeout, work)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
