#!/usr/bin/env python3
"""Writes impressions.jsonl and clicks.jsonl for the ad-attribution example.

Deterministic (no randomness): run `python3 gen.py` in this directory to
regenerate the committed files. Every record carries
  ts  - event time, epoch milliseconds (what the ad server / click tracker saw)
  at  - arrival time, epoch milliseconds (when Caravela receives it; the job's
        arrival_field, so runs are deterministic)
Each file is written in arrival order. The cases are explained in job.yaml.
"""
import datetime
import json

DAY = datetime.datetime(2026, 10, 1, tzinfo=datetime.timezone.utc)


def ms(hhmmss):
    h, m, s = (int(x) for x in hhmmss.split(":"))
    return int((DAY + datetime.timedelta(hours=h, minutes=m, seconds=s)).timestamp() * 1000)


# (id, ad_id, user_id or None, event time, arrival delay in seconds)
IMPRESSIONS = [
    ("i01", "ad-kayak", "u-ana", "10:00:00", 2),
    ("i02", "ad-kayak", "u-bea", "10:05:00", 2),
    ("i03", "ad-kayak", "u-caio", "10:10:00", 2),
    ("i04", "ad-surf", "u-caio", "10:12:00", 2),
    ("i05", "ad-surf", "u-dina", "10:20:00", 2),
    ("i06", "ad-surf", "u-edu", "10:30:00", 2),
    ("i07", "ad-kayak", "u-fabio", "11:00:00", 2),
    ("i08", "ad-tent", "u-gil", "11:30:00", 180),     # reaches us 3 minutes late
    ("i09", "ad-tent", "u-hugo", "12:00:00", 2),
    ("i10", "ad-kayak", "u-ines", "12:00:30", 2),
    ("i11", "ad-tent", None, "12:30:00", 2),           # anonymous: no user_id
    ("i12", "ad-surf", "u-joao", "15:00:00", 2),
    ("i13", "ad-surf", "u-ana", "16:30:00", 2),
]

CLICKS = [
    ("c01", "ad-kayak", "u-ana", "10:00:42", 1),
    ("c04", "ad-surf", "u-caio", "10:13:00", 1),
    ("c02", "ad-kayak", "u-bea", "10:30:00", 1),
    ("c03", "ad-kayak", "u-bea", "10:31:10", 1),
    ("c07", "ad-kayak", "u-fabio", "10:59:30", 1),     # 30 s before its impression
    ("c08", "ad-tent", "u-gil", "11:31:00", 5),        # arrives before its impression
    ("c14", "ad-surf", "u-kim", "12:20:00", 1),        # no impression
    ("c09", "ad-tent", "u-hugo", "12:10:00", 22 * 60),  # phone offline 22 minutes
    ("c05", "ad-surf", "u-dina", "14:20:00", 1),       # exactly 4 h after i05
    ("c06", "ad-surf", "u-edu", "14:30:01", 1),        # 4 h + 1 s after i06
    ("c12", "ad-surf", "u-joao", "15:20:00", 1),
    ("c13", "ad-surf", "u-ana", "16:31:00", 1),
    ("c10", "ad-kayak", "u-ines", "12:45:00", 235 * 60),  # offline almost 4 hours
]


def write(path, rows, id_field):
    out = []
    for rid, ad, user, t, delay in rows:
        rec = {id_field: rid, "ad_id": ad}
        if user is not None:
            rec["user_id"] = user
        rec["ts"] = ms(t)
        rec["at"] = ms(t) + delay * 1000
        out.append(rec)
    out.sort(key=lambda r: r["at"])  # a file source reads in arrival order
    with open(path, "w") as f:
        for rec in out:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")


write("impressions.jsonl", IMPRESSIONS, "impression_id")
write("clicks.jsonl", CLICKS, "click_id")
