#!/usr/bin/env bash
# How the checkpoint-compatibility fixture was made (once, with the caravela
# binary of commit 3c5e2ac, before the kind registries of issue 28). Kept to
# document the fixture; do not run it with newer code (see make_fixture.py).
#   midstream/  the job killed by a failpoint after 500 arrival batches: its
#               committed outputs and its checkpoints (retain 3: 8, 9, 10)
#   savepoint/  a run to the end with --savepoint-on-stop: the savepoint and
#               the outputs it committed
set -euo pipefail
CARAVELA=${CARAVELA:-caravela}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
python3 "$here/make_fixture.py" "$work"
cp "$here/job.yaml" "$work/"
cd "$work"
CARAVELA_FAILPOINT=source.after_batch:500 "$CARAVELA" run -q --data-dir data job.yaml || true
mkdir -p "$here/midstream/data"
cp -r out "$here/midstream/" && cp -r data/checkpoints "$here/midstream/data/"
rm -rf out data
"$CARAVELA" run -q --data-dir data --savepoint-on-stop sp job.yaml
mkdir -p "$here/savepoint" && cp -r sp out "$here/savepoint/"
cp ./*.jsonl "$here/"
