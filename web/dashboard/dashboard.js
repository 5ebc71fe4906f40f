// Caravela dashboard: reads the coordinator's JSON API (/api/v1/) every 2 s
// and renders workers, jobs, the selected job's tasks and source
// partitions, charts of its recent input rate, consumer lag, watermark lag,
// late and too-late rates, state and checkpoint duration, its side-output
// counts, and what holds its watermark back. Read-only. With auth on, the
// token comes from the page's #token=... fragment or the form, and stays in
// this tab (sessionStorage); it is sent as a bearer token, never in a URL.
"use strict";

const REFRESH_MS = 2000;
const params = new URLSearchParams(location.hash.slice(1));
if (params.get("token")) {
  sessionStorage.setItem("caravela-token", params.get("token"));
  params.delete("token");
  history.replaceState(null, "", "#" + params.toString());
}
let selected = params.get("job") || "";
const charts = {};

const $ = (id) => document.getElementById(id);
const text = (v) => (v === undefined || v === null ? "" : String(v));
const num = (v) => Number(v || 0);

function fmtTime(ms) {
  if (ms === null || ms === undefined) return "—";
  const n = Number(ms);
  if (!Number.isFinite(n) || n < -8.64e15 || n > 8.64e15) return "—";
  return new Date(n).toISOString().replace(".000Z", "Z");
}

function fmtBytes(b) {
  const n = num(b);
  if (n < 1024) return `${n} B`;
  if (n < 1048576) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1048576).toFixed(1)} MiB`;
}

function fmtAgo(ms) {
  const s = Math.max(0, Math.round((Date.now() - Number(ms)) / 1000));
  if (s < 120) return `${s} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

async function api(path) {
  const headers = {};
  const token = sessionStorage.getItem("caravela-token");
  if (token) headers.Authorization = "Bearer " + token;
  const r = await fetch(path, { headers });
  if (r.status === 401) {
    $("token-box").hidden = false;
    throw new Error("this coordinator needs a token");
  }
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

function fill(tableId, rows, onRow) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren();
  for (const cells of rows) {
    const tr = document.createElement("tr");
    for (const c of cells) {
      const td = document.createElement("td");
      if (c instanceof Node) td.appendChild(c);
      else td.textContent = text(c);
      tr.appendChild(td);
    }
    if (onRow) onRow(tr, cells);
    body.appendChild(tr);
  }
}

function chart(id, label, t, values) {
  const el = $(id);
  const data = [t.map((ms) => ms / 1000), values];
  if (typeof uPlot === "undefined") {
    // Built without npm: no charting library; say so once.
    if (!el.textContent) el.textContent = "charts need uPlot (built without npm): see web/README.md";
    return;
  }
  if (!charts[id]) {
    charts[id] = new uPlot(
      {
        width: 380,
        height: 170,
        series: [{}, { label, stroke: "#12355b", width: 1.5 }],
        axes: [{}, { size: 110 }],  // room for large values (watermark lag of old data)
        legend: { show: false },
      },
      data,
      el,
    );
  } else {
    charts[id].setData(data);
  }
}

async function refresh() {
  try {
    const [workers, jobs] = await Promise.all([api("/api/v1/workers"), api("/api/v1/jobs")]);
    // Live workers first; a dead one keeps its row (its id is never given
    // again) with no tasks, and says since when it is silent.
    const ws = [...(workers.workers || [])].sort((a, b) => (a.state === "DEAD") - (b.state === "DEAD"));
    fill("workers", ws.map((w) => [
      w.id, w.state === "DEAD" ? `DEAD (silent since ${fmtTime(w.last_heartbeat_ms)})` : w.draining ? "ALIVE, leaving" : w.state,
      num(w.slots), num(w.running_tasks), w.address,
    ]));
    const list = jobs.jobs || [];
    // The newest job still running (or starting, recovering); else the newest.
    const ended = (j) => ["FINISHED", "FAILED", "CANCELED"].includes(j.state);
    if (!selected && list.length > 0) selected = ([...list].reverse().find((j) => !ended(j)) || list[list.length - 1]).id;
    fill(
      "jobs",
      list.map((j) => [j.id, j.state, num(j.parallelism), num(j.epoch), num(j.last_checkpoint), j.message]),
      (tr, cells) => {
        if (cells[0] === selected) tr.classList.add("selected");
        tr.addEventListener("click", () => {
          selected = cells[0];
          location.hash = "job=" + encodeURIComponent(selected);
          refresh();
        });
      },
    );
    if (selected) await showJob(selected);
    $("status").textContent = "updated " + new Date().toLocaleTimeString();
    $("status").classList.remove("error");
  } catch (e) {
    $("status").textContent = e.message;
    $("status").classList.add("error");
  }
}

async function showJob(id) {
  const [job, series, checkpoints] = await Promise.all([
    api("/api/v1/jobs/" + encodeURIComponent(id)),
    api("/api/v1/jobs/" + encodeURIComponent(id) + "/series").catch(() => null),
    api("/api/v1/jobs/" + encodeURIComponent(id) + "/checkpoints").catch(() => null),
  ]);
  // Newest first; `caravela run` has no history (the table stays empty).
  const history = checkpoints || [];
  fill(
    "checkpoints",
    history.slice(0, 10).map((c) => [c.id, fmtTime(c.completed_at_ms), c.duration_ms, c.epoch, c.stopping ? "stopping" : "periodic"]),
  );
  if (history.length > 0) {
    const oldest = [...history].reverse();
    chart("chart-checkpoint", "ms", oldest.map((c) => c.completed_at_ms), oldest.map((c) => c.duration_ms));
  }
  $("job").hidden = false;
  $("job-id").textContent = job.id;
  $("job-state").textContent = `${job.state}, epoch ${num(job.epoch)}, last checkpoint ${num(job.last_checkpoint)}`;
  // A failed or canceled job can start again from its last checkpoint.
  const ended = job.state === "FAILED" || job.state === "CANCELED";
  $("job-restart").hidden = !ended;
  $("job-restart").textContent = !ended
    ? ""
    : `${job.state}: ${job.message || "no reason recorded"}. Once the cause is fixed, ` +
      `\`caravela restart ${job.id}\` starts it again ` +
      (Number(job.last_checkpoint || 0) > 0
        ? `from checkpoint ${num(job.last_checkpoint)} with a new epoch (add --parallelism N to change its size).`
        : "from the beginning (it has no complete checkpoint).");
  const a = (t) => t.activity || {};
  fill(
    "tasks",
    (job.tasks || []).map((t, g) => [
      // A task whose worker went silent shows its last known state and how old it is.
      g, num(t.stage), num(t.index), t.worker,
      num(t.report_age_ms) > 2000 ? `${t.state}? (no report for ${Math.round(num(t.report_age_ms) / 1000)} s)` : t.state,
      // What it read from its sources plus what exchanges brought it.
      num(t.records_in) + num(t.activity && t.activity.exchange_records_in), num(t.records_out),
      num(t.consumer_lag), num(t.last_checkpoint), fmtBytes(t.state_bytes), fmtTime(t.watermark_ms),
      (t.partitions || []).join(","), num(job.epoch),
      // Where its time went (TaskActivity): totals, the last checkpoint's in parentheses.
      `${num(a(t).alignment_ms)} (${num(a(t).last_alignment_ms)})`, num(a(t).backpressure_ms),
      `${num(a(t).checkpoint_sync_ms)} (${num(a(t).last_state_flush_ms)}+${num(a(t).last_sink_precommit_ms)}+${num(a(t).last_snapshot_ms)})`,
    ]),
  );
  // Sources that cannot read yet (a topic not created): nothing else matters.
  const waiting = [...new Set((job.tasks || []).flatMap((t) => (t.activity && t.activity.waiting) || []))];
  if (waiting.length > 0) {
    $("holdback").textContent =
      `Waiting for input: ${waiting.join("; ")}. The job reads it as soon as it exists.`;
  }
  if (!series) {
    if (waiting.length === 0) $("holdback").textContent = "no samples yet";
    return;
  }
  fill(
    "partitions",
    series.partitions.map((p) => {
      const idle = document.createElement("span");
      idle.textContent = p.idle ? "idle" : "";
      idle.className = p.idle ? "idle" : "";
      return [p.source, p.partition, p.task, p.worker, p.offset, p.lag, fmtTime(p.watermark_ms), idle, fmtAgo(p.since_ms)];
    }),
  );
  const h = series.holdback;
  const stuck = (h) =>
    h.watermark_ms === null
      ? `${h.kind === "exchange" ? "no watermark" : "no record"} yet, for ${fmtAgo(h.since_ms).replace(" ago", "")}. `
      : `watermark ${fmtTime(h.watermark_ms)}, unchanged since ${fmtAgo(h.since_ms)}. `;
  if (waiting.length === 0) $("holdback").textContent = !h
    ? "Nothing holds it back: every source partition is idle or the job has none."
    : h.kind === "exchange"
      ? `Held back by exchange ${h.exchange} partition ${h.partition}, producer task ${h.producer_task} ` +
        `(read by task ${h.task} on ${h.worker}): ` + stuck(h) + h.reason + "."
      : `Held back by source ${h.source} partition ${h.partition} (task ${h.task} on ${h.worker}): ` +
        stuck(h) + h.reason + ".";
  fill(
    "sides",
    Object.entries(series.side_records || {}).map(([name, n]) => [name, n]),
  );
  chart("chart-rate", "records/s", series.t_ms, series.records_per_s);
  chart("chart-lag", "lag", series.t_ms, series.consumer_lag);
  chart("chart-wmlag", "watermark lag", series.t_ms, series.watermark_lag_s);
  // null: no partition that is not idle has a watermark, so nothing lags.
  const lastLag = series.watermark_lag_s[series.watermark_lag_s.length - 1];
  $("wmlag-title").textContent = lastLag === null && series.t_ms.length > 0
    ? "Watermark lag (s): idle (every source partition is idle or has no record yet)"
    : "Watermark lag (s)";
  chart("chart-state", "state bytes", series.t_ms, series.state_bytes);
  chart("chart-late", "late records/s", series.t_ms, series.late_per_s || []);
  chart("chart-toolate", "too-late records/s", series.t_ms, series.too_late_per_s || []);
}

$("token-save").addEventListener("click", () => {
  sessionStorage.setItem("caravela-token", $("token").value);
  $("token-box").hidden = true;
  refresh();
});
refresh();
setInterval(refresh, REFRESH_MS);
