#!/usr/bin/env python3
"""Writes the inputs and job of the checkpoint-compatibility fixture (issue 28).

The fixture's checkpoints and savepoint were made once, by the code before the
kind registries (commit 3c5e2ac), with tests/compat/make_fixture.sh; the test
(tests/compat_test.cc) restores them with today's code. Do not regenerate them
with newer code: they stand for what users' storage already holds.
"""
import json
import random
import sys
from datetime import datetime, timedelta, timezone

out = sys.argv[1] if len(sys.argv) > 1 else "."
rng = random.Random(28)
start = datetime(2026, 10, 1, 10, 0, tzinfo=timezone.utc)
iso = lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
ms = lambda t: int(t.timestamp() * 1000)

purchases, payments = [], []
for i in range(600):
    t = start + timedelta(seconds=i * 20 + rng.randrange(120))
    delay = rng.randrange(30)
    if i % 40 == 0:
        delay = 80 * 60  # late, within the lateness
    if i % 97 == 0:
        delay = 300 * 60  # too late
    arrival = ms(t) + delay * 1000
    p = {"event_id": f"e{i}", "country": rng.choice(["PT", "BR", "AO", "MZ"]),
         "currency": rng.choice(["EUR", "USD", "BRL"]),
         "amount": round(rng.randrange(1, 20000) / 100, 2), "ts": iso(t), "at": arrival}
    purchases.append(p)
    if i % 9 == 0:
        purchases.append(dict(p, at=arrival + 4000))  # a retry
    if rng.random() < 0.6:
        pt = t + timedelta(seconds=rng.randrange(40 * 60))
        payments.append({"payment_id": f"p{i}", "event_id": f"e{i}", "ts": iso(pt),
                         "at": ms(pt) + rng.randrange(20000)})
rates = []
for h in range(0, 5 * 60, 30):
    for cur, base in (("EUR", 1.0), ("USD", 0.92), ("BRL", 0.17)):
        vf = start + timedelta(minutes=h)
        rates.append({"currency": cur, "eur_per_unit": round(base * (1 + rng.randrange(-50, 50) / 1000), 4),
                      "valid_from": iso(vf), "at": ms(vf) + rng.randrange(30000)})
countries = [{"code": c, "name": n} for c, n in
             (("PT", "Portugal"), ("BR", "Brasil"), ("AO", "Angola"), ("MZ", "Moçambique"))]

for name, rows in (("purchases", purchases), ("payments", payments), ("fx_rates", rates)):
    rows.sort(key=lambda r: r["at"])
    with open(f"{out}/{name}.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n")
with open(f"{out}/countries.jsonl", "w") as f:
    for r in countries:
        f.write(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n")
