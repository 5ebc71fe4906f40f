// The dashboard in a real browser (issue 11), against real processes:
//
//   node tests/dashboard/dashboard_test.mjs CARAVELA_BINARY OUT_DIR
//
// `caravela local` (embedded broker, coordinator with --http, one worker)
// runs a submitted job over a 4-partition topic. kcat produces records to
// partitions 0, 1 and 2 only, so partition 3 has none and, without
// idle_timeout, holds the job's watermark back. Headless Debian chromium
// (driven by playwright-core) opens the dashboard and the test asserts that
// the job, its tasks, the per-partition table (offsets equal to what was
// produced), a consumer-lag chart and the "why is this window not final"
// panel naming partition 3 render; screenshots go to OUT_DIR.
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [binary, outDir] = process.argv.slice(2);
if (!binary || !outDir) {
  console.error("usage: dashboard_test.mjs CARAVELA_BINARY OUT_DIR");
  process.exit(2);
}
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
mkdirSync(outDir, { recursive: true });
const dir = mkdtempSync(join(tmpdir(), "caravela-dashboard-"));
const failures = [];
const check = (ok, what) => {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures.push(what);
};

// ---- the cluster --------------------------------------------------------
const local = spawn(binary, ["local", "--workers", "1", "--slots", "4", "--data-dir", join(dir, "cluster"),
  "--http", "127.0.0.1:0", "--allow-path", dir], { stdio: ["ignore", "pipe", "pipe"] });
let log = "";
local.stdout.on("data", (d) => (log += d));
local.stderr.on("data", (d) => (log += d));
const ready = await new Promise((resolve) => {
  const t0 = Date.now();
  const poll = setInterval(() => {
    const m = /caravela local: broker=(\S+) coordinator=(\S+) http=(\S+) workers=1/.exec(log);
    if (m || Date.now() - t0 > 30000) {
      clearInterval(poll);
      resolve(m);
    }
  }, 100);
});
let exitCode = 1;
let browser;
try {
  if (!ready) throw new Error(`caravela local did not start:\n${log}`);
  const [, broker, coordinator, http] = ready;

  // Records on partitions 0, 1 and 2 (5, 4 and 3 of them); none on 3.
  const produced = { 0: 5, 1: 4, 2: 3 };
  for (const [p, n] of Object.entries(produced)) {
    const lines = [];
    for (let i = 0; i < n; ++i) {
      const ts = 1700000000000 + (Number(p) * 10 + i) * 60000;
      lines.push(JSON.stringify({ event_id: `e${p}-${i}`, user_id: `u${i}`, country: "PT", amount: 1, ts }));
    }
    const r = spawnSync("kcat", ["-b", broker, "-t", "purchases", "-p", p, "-P"], { input: lines.join("\n") + "\n" });
    if (r.status !== 0) throw new Error(`kcat: ${r.stderr}`);
  }
  writeFileSync(join(dir, "job.yaml"), `apiVersion: caravela/v1
kind: Job
metadata: {name: dashboard-demo}
spec:
  checkpoint: {interval: 1s}
  sources:
    - name: purchases
      kafka: {topic: purchases}
      event_time: {field: ts, format: epoch_ms}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 1h}
    - name: revenue
      window: {from: unique, tumbling: 1h, group_by: [country], aggregates: [{as: orders, count: "*"}]}
  sinks:
    - {from: revenue, file: {path: ${join(dir, "out/revenue.jsonl")}}}
`);
  const submit = spawnSync(binary, ["submit", join(dir, "job.yaml"), "--coordinator", coordinator], { encoding: "utf8" });
  if (submit.status !== 0) throw new Error(`caravela submit: ${submit.stdout}${submit.stderr}`);
  const job = submit.stdout.trim().split("\n").pop();
  console.log(`job ${job} on ${coordinator}, dashboard http://${http}/`);

  // ---- the browser ------------------------------------------------------
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1300 } });
  await page.goto(`http://${http}/#job=${encodeURIComponent(job)}`);
  const cellsOf = (table) =>
    page.$$eval(`#${table} tbody tr`, (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  // Wait until every partition reports what was produced (the worker's
  // heartbeats and the coordinator's 1 s samples).
  const want = JSON.stringify(produced);
  let partitions = [];
  const t0 = Date.now();
  while (Date.now() - t0 < 60000) {
    partitions = await cellsOf("partitions");
    const got = {};
    for (const row of partitions) if (Number(row[4]) > 0) got[row[1]] = Number(row[4]);
    if (JSON.stringify(got) === want && partitions.length === 4) break;
    await page.waitForTimeout(500);
  }
  await page.waitForTimeout(4000);  // a few more samples for the charts
  await page.screenshot({ path: join(outDir, "dashboard-job.png"), fullPage: true });
  console.log(`screenshot ${join(outDir, "dashboard-job.png")}`);

  const jobs = await cellsOf("jobs");
  check(jobs.some((r) => r[0] === job && r[1] === "RUNNING"), `jobs table lists ${job} RUNNING`);
  const tasks = await cellsOf("tasks");
  check(tasks.length >= 1 && tasks.every((r) => r[4] === "TASK_RUNNING"), `task table: ${tasks.length} tasks, all TASK_RUNNING`);
  check(partitions.length === 4, `partition table has the topic's 4 partitions (${partitions.length})`);
  for (const [p, n] of Object.entries(produced)) {
    const row = partitions.find((r) => r[1] === p);
    check(row && Number(row[4]) === n && Number(row[5]) === 0, `partition ${p}: offset ${n}, lag 0 (${row})`);
    check(row && row[6] !== "—", `partition ${p} has a watermark (${row && row[6]})`);
  }
  const silent = partitions.find((r) => r[1] === "3");
  check(silent && Number(silent[4]) === 0 && silent[6] === "—", `partition 3: no record, no watermark (${silent})`);
  const holdback = await page.textContent("#holdback");
  check(/source purchases partition 3\b/.test(holdback) && /no record yet/.test(holdback),
    `"not final" panel names partition 3: ${holdback}`);
  // uPlot draws into a canvas once it has samples.
  const lagChart = await page.$("#chart-lag canvas");
  check(lagChart !== null, "consumer-lag chart rendered (uPlot canvas)");
  const workers = await cellsOf("workers");
  check(workers.length === 1 && workers[0][1] === "ALIVE", `workers table: ${JSON.stringify(workers)}`);
  exitCode = failures.length === 0 ? 0 : 1;
} catch (e) {
  console.error(`error: ${e.stack || e}\n--- caravela local:\n${log}`);
  exitCode = 1;
} finally {
  if (browser) await browser.close();
  local.kill("SIGTERM");
  await new Promise((r) => setTimeout(r, 500));
  if (local.exitCode === null) local.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
}
console.log(`${failures.length} failure${failures.length === 1 ? "" : "s"}`);
process.exit(exitCode);
