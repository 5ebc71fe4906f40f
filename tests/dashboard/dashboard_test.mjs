// The dashboard in a real browser (issue 11), against real processes, as
// the coordinator serves it and as `caravela run --http` does:
//
//   node tests/dashboard/dashboard_test.mjs CARAVELA_BINARY OUT_DIR
//
// `caravela local` (embedded broker, coordinator with --http, one worker)
// runs a submitted job over a 4-partition topic; then `caravela run --http`
// runs the same job in one process. kcat produces records to
// partitions 0, 1 and 2 only, so partition 3 has none and, without
// idle_timeout, holds the job's watermark back. Headless Debian chromium
// (driven by playwright-core) opens the dashboard and the test asserts that
// the job, its tasks, the per-partition table (offsets equal to what was
// produced), the side-output counts (a conflicting copy), the consumer-lag
// and too-late charts and the "why is this window not final" panel naming
// partition 3 render; screenshots go to OUT_DIR.
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

// Starts `args` and waits for `pattern` in its output: [child, match].
async function start(args, pattern) {
  const child = spawn(binary, args, { stdio: ["ignore", "pipe", "pipe"] });
  child.log = "";
  child.stdout.on("data", (d) => (child.log += d));
  child.stderr.on("data", (d) => (child.log += d));
  const match = await new Promise((resolve) => {
    const t0 = Date.now();
    const poll = setInterval(() => {
      const m = pattern.exec(child.log);
      if (m || Date.now() - t0 > 30000) {
        clearInterval(poll);
        resolve(m);
      }
    }, 100);
  });
  if (!match) throw new Error(`${args.join(" ")} did not start:\n${child.log}`);
  return [child, match];
}

async function stop(child) {
  child.kill("SIGTERM");
  for (let i = 0; i < 40 && child.exitCode === null; ++i) await new Promise((r) => setTimeout(r, 100));
  if (child.exitCode === null) child.kill("SIGKILL");
}

// Records on partitions 0, 1 and 2 (5, 4 and 3 of them); none on 3.
const produced = { 0: 5, 1: 4, 2: 3 };
function produce(broker) {
  for (const [p, n] of Object.entries(produced)) {
    const lines = [];
    for (let i = 0; i < n; ++i) {
      const ts = 1700000000000 + (Number(p) * 10 + i) * 60000;
      // The last record of partition 2 repeats e2-0's id with other content:
      // a conflict, counted on the side-output table.
      const conflict = p === "2" && i === n - 1;
      lines.push(JSON.stringify(conflict
        ? { event_id: "e2-0", user_id: "u0", country: "PT", amount: 2, ts: 1700000000000 + 20 * 60000 }
        : { event_id: `e${p}-${i}`, user_id: `u${i}`, country: "PT", amount: 1, ts }));
    }
    const r = spawnSync("kcat", ["-b", broker, "-t", "purchases", "-p", p, "-P"], { input: lines.join("\n") + "\n" });
    if (r.status !== 0) throw new Error(`kcat: ${r.stderr}`);
  }
}

function writeJob(name) {
  const file = join(dir, `${name}.yaml`);
  writeFileSync(file, `apiVersion: caravela/v1
kind: Job
metadata: {name: ${name}}
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
    - {from: revenue, file: {path: ${join(dir, name, "revenue.jsonl")}}}
`);
  return file;
}

// Opens the dashboard at `http` on `job` and checks what it shows.
async function checkDashboard(browser, scene, http, job, worker) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1300 } });
  await page.goto(`http://${http}/#job=${encodeURIComponent(job)}`);
  const cellsOf = (table) =>
    page.$$eval(`#${table} tbody tr`, (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  // Until every partition reports what was produced.
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
  // The table as it is now: offsets are read live, watermarks come with the
  // task's next status snapshot (every 250 ms), so re-read it.
  partitions = await cellsOf("partitions");
  const shot = join(outDir, `dashboard-${scene}.png`);
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`${scene}: screenshot ${shot}`);

  const jobs = await cellsOf("jobs");
  check(jobs.some((r) => r[0] === job && r[1] === "RUNNING"), `${scene}: jobs table lists ${job} RUNNING`);
  const tasks = await cellsOf("tasks");
  check(tasks.length >= 1 && tasks.every((r) => r[4] === "TASK_RUNNING" && r[3] === worker),
    `${scene}: task table: ${tasks.length} tasks, all TASK_RUNNING on ${worker}`);
  // One task reads the 4 partitions of the topic.
  check(tasks.some((r) => r[11] === "0,1,2,3"), `${scene}: task table lists its partitions (${tasks.map((r) => r[11])})`);
  check(partitions.length === 4, `${scene}: partition table has the topic's 4 partitions (${partitions.length})`);
  for (const [p, n] of Object.entries(produced)) {
    const row = partitions.find((r) => r[1] === p);
    check(row && Number(row[4]) === n && Number(row[5]) === 0, `${scene}: partition ${p}: offset ${n}, lag 0 (${row})`);
    check(row && row[6] !== "—", `${scene}: partition ${p} has a watermark (${row && row[6]})`);
  }
  const silent = partitions.find((r) => r[1] === "3");
  check(silent && Number(silent[4]) === 0 && silent[6] === "—", `${scene}: partition 3: no record, no watermark (${silent})`);
  const holdback = await page.textContent("#holdback");
  check(/source purchases partition 3\b/.test(holdback) && /no record yet/.test(holdback),
    `${scene}: "not final" panel names partition 3: ${holdback}`);
  if (scene === "cluster") {
    // The coordinator's checkpoint history (every 1 s here).
    const checkpoints = await cellsOf("checkpoints");
    check(checkpoints.length >= 2 && checkpoints.every((r) => r[4] === "periodic" && Number(r[2]) >= 0),
      `${scene}: checkpoint history: ${checkpoints.length} periodic checkpoints (${JSON.stringify(checkpoints[0])})`);
    check((await page.$("#chart-checkpoint canvas")) !== null, `${scene}: checkpoint-duration chart rendered`);
  }
  if (scene === "run") {
    // One task holds the dedup and window state: its size at checkpoints.
    check(tasks.some((r) => r[9] !== "0 B"), `${scene}: the task's state size is shown (${tasks.map((r) => r[9])})`);
  }
  const sides = await cellsOf("sides");
  check(sides.some((r) => r[0] === "unique.conflicts" && r[1] === "1"),
    `${scene}: side-output table counts the conflict (${JSON.stringify(sides)})`);
  // uPlot draws into a canvas once it has samples.
  check((await page.$("#chart-lag canvas")) !== null, `${scene}: consumer-lag chart rendered (uPlot canvas)`);
  check((await page.$("#chart-toolate canvas")) !== null, `${scene}: too-late chart rendered (uPlot canvas)`);
  const workers = await cellsOf("workers");
  check(workers.length === 1 && workers[0][0] === worker && workers[0][1] === "ALIVE",
    `${scene}: workers table: ${JSON.stringify(workers)}`);
  await page.close();
}

// Without #job=, the dashboard opens the newest job that still runs, not a
// newer canceled one. A worker killed: its tasks show their last state with
// the age of their last report until its lease ends (10 s); then it is
// listed DEAD, after the live ones, with no tasks (`caravela local` started
// a new worker meanwhile).
async function checkSelectionAndSilentWorker(browser, http, coordinator, local, job) {
  const cli = (...args) => spawnSync(binary, [...args, "--coordinator", coordinator], { encoding: "utf8" });
  const newer = cli("submit", writeJob("cluster-newer"));
  if (newer.status !== 0) throw new Error(`caravela submit: ${newer.stdout}${newer.stderr}`);
  const newerId = newer.stdout.trim().split("\n").pop();
  const canceled = cli("cancel", newerId);
  if (canceled.status !== 0) throw new Error(`caravela cancel: ${canceled.stdout}${canceled.stderr}`);
  const page = await browser.newPage({ viewport: { width: 1400, height: 1300 } });
  await page.goto(`http://${http}/`);
  await page.waitForSelector("#job:not([hidden])", { timeout: 10000 });
  const shown = (await page.textContent("#job-id")).trim();
  check(shown === job, `the dashboard opens the running ${job}, not the newer canceled ${newerId} (${shown})`);

  const workerPid = spawnSync("pgrep", ["-P", String(local.pid)], { encoding: "utf8" }).stdout.trim().split("\n")[0];
  process.kill(Number(workerPid), "SIGKILL");
  const cellsOf = (table) =>
    page.$$eval(`#${table} tbody tr`, (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  await page.waitForTimeout(4000);
  const stale = await cellsOf("tasks");
  check(stale.length >= 1 && stale.every((r) => /^TASK_RUNNING\? \(no report for \d+ s\)$/.test(r[4])),
    `tasks of the killed worker show their report's age: ${JSON.stringify(stale.map((r) => r[4]))}`);
  let workers = [];
  for (const t0 = Date.now(); Date.now() - t0 < 20000;) {
    workers = await cellsOf("workers");
    if (workers.some((r) => r[1].startsWith("DEAD"))) break;
    await page.waitForTimeout(500);
  }
  const dead = workers.find((r) => r[0] === "worker-1");
  check(dead && /^DEAD \(silent since /.test(dead[1]) && dead[3] === "0" && workers[workers.length - 1] === dead &&
    workers[0][1] === "ALIVE",
    `workers table: the dead worker last, with no tasks, the restarted one alive: ${JSON.stringify(workers)}`);
  await page.close();
}

let exitCode = 1;
let browser;
const children = [];
try {
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });

  // 1. A cluster: `caravela local` (broker, coordinator, one worker).
  const [local, m] = await start(
    ["local", "--workers", "1", "--slots", "4", "--data-dir", join(dir, "cluster"), "--http", "127.0.0.1:0",
      "--allow-path", dir],
    /caravela local: broker=(\S+) coordinator=(\S+) http=(\S+) workers=1/);
  children.push(local);
  const [, broker, coordinator, http] = m;
  produce(broker);
  const submit = spawnSync(binary, ["submit", writeJob("cluster-demo"), "--coordinator", coordinator],
    { encoding: "utf8" });
  if (submit.status !== 0) throw new Error(`caravela submit: ${submit.stdout}${submit.stderr}`);
  const job = submit.stdout.trim().split("\n").pop();
  console.log(`cluster: job ${job}, dashboard http://${http}/`);
  await checkDashboard(browser, "cluster", http, job, "worker-1");
  await checkSelectionAndSilentWorker(browser, http, coordinator, local, job);
  await stop(local);

  // 2. One process: `caravela run --http` on its embedded broker.
  const file = writeJob("run-demo");
  // It waits for its input topic: produce as soon as its broker is up.
  const [run, r] = await start(["run", file, "-q", "--data-dir", join(dir, "run-data"), "--http", "127.0.0.1:0"],
    /embedded broker: bootstrap (\S+)[\s\S]*http=(\S+)/);
  children.push(run);
  produce(r[1]);
  console.log(`run: dashboard http://${r[2]}/`);
  await checkDashboard(browser, "run", r[2], "run-demo", "local");
  exitCode = failures.length === 0 ? 0 : 1;
} catch (e) {
  console.error(`error: ${e.stack || e}`);
  failures.push(String(e.message || e));
  for (const c of children) console.error(`--- ${c.spawnargs.slice(1, 3).join(" ")}:\n${c.log}`);
  exitCode = 1;
} finally {
  if (browser) await browser.close();
  for (const c of children) if (c.exitCode === null) await stop(c);
  rmSync(dir, { recursive: true, force: true });
}
console.log(`${failures.length} failure${failures.length === 1 ? "" : "s"}`);
process.exit(exitCode);
