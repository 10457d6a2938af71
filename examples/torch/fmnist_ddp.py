#!/usr/bin/env python3
"""fmnist_ddp.py: a small CNN on Fashion-MNIST in PyTorch DistributedDataParallel,
with gradients averaged by libddl (ddl.torch.allreduce_hook) and crash-safe
checkpoints through ddl.checkpoint.

    ddlrun -n 4 python3 examples/torch/fmnist_ddp.py --epochs 3
    ddlrun -n 4 --restarts 2 --checkpoint-dir /tmp/ck \\
        python3 examples/torch/fmnist_ddp.py --checkpoint-every 50

Every rank takes its share of each global batch (--batch samples, split
between the ranks); the data order depends only on the epoch, so a run
restarted from a checkpoint continues exactly where the checkpoint was
taken and ends with the same weights as an uninterrupted run when every
element's reduction order is independent of its place in the gradient
buckets, whose layout DDP changes after its first step (of a run or of a
restart): DDL_ALLREDUCE_ALGO=rd (recursive doubling) does that; the ring's
order depends on the element's position.

Checkpoints (--checkpoint-every N, into --checkpoint-dir or
$DDL_CHECKPOINT_DIR): the model's parameters and buffers, the optimizer's
momentum buffers and the step, every N steps; at start the latest one is
restored.  The data come from Debian's dataset-fashion-mnist
(/usr/share/datasets/fashion-mnist, or --data / $DDL_FMNIST_DIR).

--warm-restart (ddl.warm_enable): after a failure elsewhere this process is
kept; it drops its DDP model, joins the new generation (ddl.torch.rejoin:
its rank may change), reloads the last committed checkpoint from the copy
it kept in memory (from disk when it has none of that step) and goes on.
It keeps two copies: the last committed checkpoint and the one being saved,
taken before save(), since a peer lost inside the commit can leave that one
latest (rank 0 published it) although save() raised here.
Only the processes that died start again.

It ends with `final test accuracy: X%` and one `rank R: weights sha256 H`
line per rank, and exits 1 if the replicas' weights differ.
"""

import argparse
import gzip
import hashlib
import os
import signal
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import ddl
import ddl.checkpoint
import ddl.torch
import io

# One write(2) per line: the ranks share the launcher's stdout, and an
# unbuffered stdout (python3 -u, PYTHONUNBUFFERED) writes a line and its
# newline separately, so that two ranks' lines can run together.
sys.stdout = io.TextIOWrapper(open(sys.stdout.fileno(), "wb", buffering=1 << 16, closefd=False),
                              line_buffering=True)


MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    """An IDX file (gzip'd or not) as a numpy array."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            data = f.read()
    except OSError as e:
        sys.exit("fmnist_ddp: cannot read %s: %s (install the Debian package "
                 "dataset-fashion-mnist, or pass --data DIR)" % (path, e.strerror or e))
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        sys.exit("fmnist_ddp: %s is not an IDX file of unsigned bytes" % path)
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split):
    images = read_idx(os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % split))
    labels = read_idx(os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % split))
    x = torch.from_numpy(((images.astype(np.float32) / 255.0) - MEAN) / STD).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


class Net(nn.Module):
    """conv 3x3 (16) - pool - conv 3x3 (32) - pool - fc 64 - fc 10: 105 k parameters."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def weights_sha256(net):
    h = hashlib.sha256()
    for k, v in net.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def evaluate(net, x, y):
    """Test accuracy over the ranks: each rank a contiguous share."""
    n, r = ddl.size(), ddl.rank()
    lo, hi = len(x) * r // n, len(x) * (r + 1) // n
    correct = np.zeros(2, np.int64)
    net.eval()
    with torch.no_grad():
        for i in range(lo, hi, 1000):
            j = min(i + 1000, hi)
            correct[0] += int((net(x[i:j]).argmax(1) == y[i:j]).sum())
    net.train()
    correct[1] = hi - lo
    ddl.allreduce(correct)
    return 100.0 * correct[0] / max(correct[1], 1)


def checkpoint_state(net, opt):
    """The checkpoint's tensors: the model's state and the momentum buffers."""
    tensors = {"model." + k: v for k, v in net.state_dict().items()}
    for i, p in enumerate(net.parameters()):
        buf = opt.state.get(p, {}).get("momentum_buffer")
        if buf is not None:
            tensors["momentum.%d" % i] = buf
    return tensors


def save_checkpoint(ckdir, step, net, opt):
    ddl.checkpoint.save(ckdir, step, checkpoint_state(net, opt), {"step": step})


def load_state(net, opt, tensors):
    with torch.no_grad():
        net.load_state_dict({k[len("model."):]: v for k, v in tensors.items()
                             if k.startswith("model.")})
        for i, p in enumerate(net.parameters()):
            if "momentum.%d" % i in tensors:
                opt.state[p]["momentum_buffer"] = tensors["momentum.%d" % i].clone()


def restore_checkpoint(ckdir, net, opt):
    step, tensors, meta = ddl.checkpoint.restore(ckdir)
    if step < 0:
        return 0
    load_state(net, opt, tensors)
    return int(meta["step"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128, help="global batch (split between ranks)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--train-samples", type=int, default=0,
                    help="use only the first N training samples (0: all 60000)")
    ap.add_argument("--test-samples", type=int, default=0, help="likewise for the test set")
    ap.add_argument("--data", default=os.environ.get("DDL_FMNIST_DIR",
                                                     "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                    help="save a checkpoint every N steps (0: never)")
    ap.add_argument("--checkpoint-dir", default=os.environ.get("DDL_CHECKPOINT_DIR", ""))
    ap.add_argument("--hook", choices=("allreduce", "fp16", "bf16", "gloo"), default="allreduce",
                    help="gradient averaging: a ddl hook, or DDP's own gloo allreduce")
    ap.add_argument("--die-after-checkpoint", type=int, default=-1, metavar="RANK",
                    help="(fault tests) in generation 0, rank RANK SIGKILLs itself 3 steps "
                         "after the first checkpoint")
    ap.add_argument("--warm-restart", action="store_true",
                    help="after a failure elsewhere, stay: rejoin the new generation and "
                         "resume from the checkpoint kept in memory (ddl.warm_enable)")
    ap.add_argument("--step-times", action="store_true",
                    help="(benchmarks) print 'first-step gen G at NS' (the wall clock in ns) "
                         "after each generation's first step")
    args = ap.parse_args()
    if args.checkpoint_every > 0 and not args.checkpoint_dir:
        ap.error("--checkpoint-every needs --checkpoint-dir (or DDL_CHECKPOINT_DIR)")

    torch.set_num_threads(1)
    rank, size = ddl.torch.init_process_group()
    generation = int(os.environ.get("DDL_GENERATION", "0"))
    t_start = time.time()

    x_train, y_train = load(args.data, "train")
    x_test, y_test = load(args.data, "t10k")
    if args.train_samples:
        x_train, y_train = x_train[:args.train_samples], y_train[:args.train_samples]
    if args.test_samples:
        x_test, y_test = x_test[:args.test_samples], y_test[:args.test_samples]

    warm = False
    if args.warm_restart:
        try:
            ddl.warm_enable()
            warm = True
        except ddl.Error as e:
            if rank == 0:
                print("fmnist_ddp: --warm-restart: %s; restarts stay cold" % e, flush=True)

    torch.manual_seed(0)
    net = Net()
    hooks = {"allreduce": ddl.torch.allreduce_hook, "fp16": ddl.torch.fp16_compress_hook,
             "bf16": ddl.torch.bf16_compress_hook}

    def wrap():
        m = torch.nn.parallel.DistributedDataParallel(net)
        if args.hook in hooks:
            m.register_comm_hook(None, hooks[args.hook])
        return m
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)

    steps_per_epoch = len(x_train) // args.batch
    total = steps_per_epoch * args.epochs
    step = 0
    if args.checkpoint_dir:
        step = restore_checkpoint(args.checkpoint_dir, net, opt)
        if step and rank == 0:
            print("generation %d: resumed from the checkpoint of step %d" % (generation, step),
                  flush=True)
        elif step and warm:  # a new worker among kept ones
            print("rank %d: generation %d: a new worker, resumed from the checkpoint of step %d"
                  % (rank, generation, step), flush=True)
    # DDP only after the restore: its constructor broadcasts rank 0's weights
    # to every rank, and in a warm restart the kept ranks' new DDP meets a
    # fresh rank 0 here; it must send the checkpoint's, not its initial ones
    model = wrap()
    first_ckpt = None
    # --warm-restart: step -> tensors, the last committed checkpoint and the
    # one being committed: a peer lost inside the commit can leave that one
    # latest (rank 0 published it) although this rank's save() raised
    kept = {}
    gen_first = True
    lo, hi = args.batch * rank // size, args.batch * (rank + 1) // size
    t_epoch, loss_sum, loss_n = time.time(), 0.0, 0
    while step < total:
        try:
            epoch, k = divmod(step, steps_per_epoch)
            perm = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(epoch))
            idx = perm[k * args.batch + lo:k * args.batch + hi]
            out = model(x_train[idx])
            # the mean over the global batch: DDP averages the ranks' gradients
            loss = F.cross_entropy(out, y_train[idx]) * (len(idx) * size / args.batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
            step += 1
            ddl.heartbeat(step)
            if gen_first and args.step_times:
                print("first-step gen %d at %d" % (generation, time.time_ns()), flush=True)
            gen_first = False
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                if warm:
                    kept[step] = {name: t.detach().clone()
                                  for name, t in checkpoint_state(net, opt).items()}
                save_checkpoint(args.checkpoint_dir, step, net, opt)
                if warm:  # committed on every rank: the older copies are not needed
                    kept = {step: kept[step]}
                if first_ckpt is None:
                    first_ckpt = step
            if (generation == 0 and rank == args.die_after_checkpoint and first_ckpt is not None
                    and step == first_ckpt + 3):
                print("rank %d: killing myself at step %d (checkpoint at %d)"
                      % (rank, step, first_ckpt), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if step % steps_per_epoch == 0:
                acc = evaluate(net, x_test, y_test)
                if rank == 0:
                    print("epoch %d/%d  loss %.4f  test-acc %.2f%%  (%.1f s)"
                          % (step // steps_per_epoch, args.epochs, loss_sum / max(loss_n, 1),
                             acc, time.time() - t_epoch), flush=True)
                t_epoch, loss_sum, loss_n = time.time(), 0.0, 0
        except Exception as e:  # DDP raises the hook's ddl.Restart as a RuntimeError
            if not (warm and (isinstance(e, ddl.Restart) or ddl.restart_pending())):
                raise
            model = None  # its process group goes with it (ddl.torch.rejoin)
            old, t0 = rank, time.time()
            try:
                rank, size = ddl.torch.rejoin()
            except ddl.Error as e:  # withdrawn: the supervisor restarts this rank cold
                print("rank %d: warm restart failed (%s); exit, to be restarted cold" % (old, e),
                      flush=True)
                return 1
            generation = int(os.environ.get("DDL_GENERATION", "0"))
            # the step every rank committed: the kept copy if it is that one
            latest = ddl.checkpoint.latest(args.checkpoint_dir) if args.checkpoint_dir else -1
            if latest in kept:
                load_state(net, opt, kept[latest])
                kept = {latest: kept[latest]}
                step, where = latest, "in memory"
            else:
                step = restore_checkpoint(args.checkpoint_dir, net, opt) \
                    if args.checkpoint_dir else 0
                where, kept = "on disk", {}
            print("rank %d: warm restart %d: rank %d of %d, from checkpoint step %d %s (%.2f s)"
                  % (old, generation, rank, size, step, where, time.time() - t0), flush=True)
            model = wrap()
            lo, hi = args.batch * rank // size, args.batch * (rank + 1) // size
            gen_first = True

    acc = evaluate(net, x_test, y_test)
    digest = weights_sha256(net)
    print("rank %d: weights sha256 %s" % (rank, digest), flush=True)
    allh = np.zeros(32 * size, np.uint8)
    ddl.allgather(allh, np.frombuffer(bytes.fromhex(digest), np.uint8).copy())
    same = all(allh[32 * i:32 * (i + 1)].tobytes().hex() == digest for i in range(size))
    if args.checkpoint_every:
        ddl.checkpoint.wait()
    if rank == 0:
        if same:
            print("weights: all %d ranks agree" % size)
        else:
            print("weights: THE RANKS DISAGREE", file=sys.stderr)
        print("final test accuracy: %.2f%%" % acc)
        print("time: %.1f s (%d steps of %d samples on %d ranks)"
              % (time.time() - t_start, total, args.batch, size), flush=True)
    torch.distributed.destroy_process_group()
    ddl.finalize()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
