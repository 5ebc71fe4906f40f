#!/usr/bin/env python3
"""A broker's own latency floor: kcat -> broker -> kcat, no Caravela job.

    bench/broker_floor.py [--bootstrap HOST:PORT] [--rate 5000] [--seconds 40]
                          [--partitions 8] [--linger 5] [--consumers 1]

Without --bootstrap it starts `build/cli/caravela broker` (the embedded
broker, librdkafka's mock cluster) with a topic of --partitions partitions.
A kcat producer writes --rate JSON records/s keyed by user id, each with its
produce time; --consumers kcat consumers read the topic from its end (the
first one measures produce -> read latency). Prints p50/p99/max and, for the
embedded broker, the broker process's CPU seconds (docs/benchmarks.md "The
embedded broker's ceiling"). Needs kcat.
"""
import argparse, json, os, random, re, subprocess, sys, threading, time

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--bootstrap"); ap.add_argument("--rate", type=int, default=5000)
ap.add_argument("--seconds", type=int, default=40); ap.add_argument("--partitions", type=int, default=8)
ap.add_argument("--linger", default="5"); ap.add_argument("--consumers", type=int, default=1)
ap.add_argument("--binary", default=os.path.join(os.path.dirname(__file__), "..", "build", "cli", "caravela"))
a = ap.parse_args()
broker = None
topic = "floor-%d" % os.getpid()
if a.bootstrap:
    boot = a.bootstrap  # the topic is auto-created by the producer
else:
    log = "/tmp/broker-floor-%d.log" % os.getpid()
    broker = subprocess.Popen([a.binary, "broker", "--port", "0", "--topic", "%s:%d" % (topic, a.partitions)],
                              stdout=open(log, "w"), stderr=subprocess.STDOUT)
    for _ in range(100):
        m = re.search(r"listening on (\S+)", open(log).read())
        if m: break
        time.sleep(0.1)
    else:
        sys.exit("the embedded broker did not start:\n" + open(log).read())
    boot = m.group(1)
lat = []
def consume(record):
    c = subprocess.Popen(["kcat", "-C", "-b", boot, "-t", topic, "-o", "end", "-u", "-q",
                          "-X", "fetch.wait.max.ms=10", "-f", "%s\n"], stdout=subprocess.PIPE, text=True, bufsize=1)
    for line in c.stdout:
        if record: lat.append(time.time() * 1000 - json.loads(line)["produce_ms"])
for i in range(a.consumers): threading.Thread(target=consume, args=(i == 0,), daemon=True).start()
time.sleep(2)
prod = subprocess.Popen(["kcat", "-P", "-b", boot, "-t", topic, "-K", "\t", "-X", "linger.ms=" + a.linger],
                        stdin=subprocess.PIPE, text=True, bufsize=1)
n, t0 = 0, time.time()
while time.time() - t0 < a.seconds:
    due = int((time.time() - t0) * a.rate)
    while n < due:
        u = random.randrange(1000)
        rec = {"event_id": "e%d" % n, "user_id": "u%d" % u, "amount": 10, "produce_ms": int(time.time() * 1000)}
        prod.stdin.write("u%d\t%s\n" % (u, json.dumps(rec))); n += 1
    prod.stdin.flush(); time.sleep(0.005)
prod.stdin.close(); prod.wait(); time.sleep(3)
ls = sorted(lat)
if not ls: sys.exit("the consumer read nothing")
q = lambda p: ls[min(len(ls) - 1, int(p * len(ls)))]
cpu = ""
if broker is not None:
    st = open("/proc/%d/stat" % broker.pid).read().rsplit(")", 1)[1].split()
    cpu = "; broker CPU %.1f s" % ((int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK"))
    broker.terminate()
print("%d records/s for %d s, %d partitions, linger %s ms, %d consumer(s): produced %d, seen %d: "
      "p50 %.0f ms, p99 %.0f ms, max %.0f ms%s" % (a.rate, a.seconds, a.partitions, a.linger, a.consumers,
                                                  n, len(ls), q(.5), q(.99), ls[-1], cpu), flush=True)
os._exit(0)
