# callgrind instruction counts per EVALSHA of scripts on redis-server.
# usage: callgrind.py name=FILE:ARGS...: FILE a whole script (splice.py DIR gcra.lua
# writes one), ARGS its ARGV after the key, space-separated; N calls (10,000)
# over 1,000 keys after 2,000 to warm them; prints instructions per call.
import sys, subprocess, time, os, glob, re
port = 6499
N = int(os.environ.get("N", "10000"))
out = os.environ.get("OUT", "/tmp/callgrind-out")
os.makedirs(out, exist_ok=True)
for f in glob.glob(out + "/callgrind.out.*"): os.remove(f)
p = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out + "/callgrind.out.%p",
    "redis-server", "--port", str(port), "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def cli(*a, inp=None):
    return subprocess.run(["redis-cli", "-p", str(port)] + list(a), capture_output=True, text=True, input=inp).stdout.strip()
for _ in range(200):
    if cli("ping") == "PONG": break
    time.sleep(0.2)
def total():
    subprocess.run(["callgrind_control", "-d", str(p.pid)], capture_output=True)
    time.sleep(0.5)
    files = sorted(glob.glob(out + "/callgrind.out.%d*" % p.pid), key=os.path.getmtime)
    for line in open(files[-1]):
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1])
try:
    for spec in sys.argv[1:]:
        name, rest = spec.split("=", 1)
        path, args = rest.split(":", 1)
        src = open(path).read()
        sha = subprocess.run(["redis-cli", "-p", str(port), "-x", "script", "load"], input=src, capture_output=True, text=True).stdout.strip()
        bench = ["redis-benchmark", "-p", str(port), "-c", "1", "-P", "20", "-r", "1000", "-q", "evalsha", sha, "1", "k:" + name + ":__rand_int__"] + args.split()
        r = cli("evalsha", sha, "1", "k:probe:" + name, *args.split())
        subprocess.run(bench[:5] + ["-n", "2000"] + bench[5:], capture_output=True)  # warm: every key exists
        subprocess.run(["callgrind_control", "-z", str(p.pid)], capture_output=True)
        t0 = total()
        subprocess.run(bench[:5] + ["-n", str(N)] + bench[5:], capture_output=True)
        t1 = total()
        if os.environ.get("ANN"):
            files = sorted(glob.glob(out + "/callgrind.out.%d*" % p.pid), key=os.path.getmtime)
            ann = subprocess.run(["callgrind_annotate", "--inclusive=" + os.environ.get("ANN"), files[-1]], capture_output=True, text=True).stdout
            open(out + "/ann_" + name + ".txt", "w").write(ann)
        subprocess.run(["callgrind_control", "-z", str(p.pid)], capture_output=True)
        print("%-28s %9.0f instr/call   reply: %s" % (name, (t1 - t0) / N, r.replace("\n", " ")), flush=True)
finally:
    p.terminate(); p.wait()
