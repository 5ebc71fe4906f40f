// Alerts and dashboards shipped, tested (issue 32):
//
//   node tests/deploy/check_monitoring.mjs REPO_ROOT CARAVELA_BINARY
//
// 1. deploy/prometheus/caravela-rules.yaml passes `promtool check rules`,
//    and `promtool test rules` runs its unit tests (caravela-rules.test.yaml:
//    each alert fires on synthetic series, and does not on others).
// 2. deploy/grafana/caravela.json: a datasource and a job_id variable, every
//    panel and query on ${datasource}, per-job queries filtered by $job_id,
//    every query valid PromQL (promtool, as a rule file of them).
// 3. The Kubernetes forms: deploy/prometheus/sync-k8s --check (the
//    ConfigMap and PrometheusRule copies of the rules, the dashboard's
//    ConfigMap are current); deploy/k8s/monitoring (PodMonitor) agrees with
//    the pods, Secret and scrape config of deploy/k8s; the scrape config of
//    deploy/k8s/prometheus.yaml passes `promtool check config`.
// 4. Every metric name the rules' and the dashboard's queries use is one the
//    binary exports: a real broker, coordinator and two workers (--http) run
//    a Kafka job with records until it checkpoints; one worker is killed, the
//    coordinator declares it dead and restarts the job on the other; the
//    names are those of the coordinator's and workers' /metrics over that
//    run. Allowed besides: the names the rules record, and `up`. A selector
//    that matches on job_id (and the job_id variable's metric) must name a
//    series exported with a job_id label, or one recorded per job (a name
//    whose level starts with job_id); so must every series of a query that
//    groups or matches on job_id; a dashboard query filters every series
//    exported with job_id by $job_id. The job's own series on the workers
//    (records in, operators, too late, restores) must carry its job_id and
//    job_name first.
// 5. A real Prometheus scrapes those processes with the rules (evaluated
//    every second): every rule evaluates without error, the recorded
//    consumer lag, records read per second and too-late records per
//    operator carry the job's job_id, and so do its operator watermarks;
//    after the kill the CaravelaJobRestarted alert fires and
//    CaravelaTargetDown is pending for the dead worker.
// Prints each problem and "N problems" at the end; exit 1 if any.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import YAML from "yaml";

const [root, binary] = process.argv.slice(2);
if (!root || !binary) {
  console.error("usage: check_monitoring.mjs REPO_ROOT CARAVELA_BINARY");
  process.exit(2);
}
const t0 = Date.now();
const problems = [];
const problem = (where, what) => problems.push(`${where}: ${what}`);
const say = (what) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${what}`);
const rulesFile = join(root, "deploy/prometheus/caravela-rules.yaml");
const rulesTest = join(root, "deploy/prometheus/caravela-rules.test.yaml");
const dashboardFile = join(root, "deploy/grafana/caravela.json");
const dir = mkdtempSync(join(tmpdir(), "caravela-monitoring-"));
const run = (cmd, args, opts = {}) => spawnSync(cmd, args, { encoding: "utf8", ...opts });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- PromQL: the metric names of an expression ------------------------------
const KEYWORDS = new Set(["and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
  "group_right", "offset", "bool", "inf", "nan", "atan2"]);
function metricNames(expr) {
  let e = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')  // strings
    .replace(/\$\{?\w+\}?/g, " ")                                      // Grafana variables
    .replace(/\{[^}]*\}/g, " ")                                        // label matchers
    .replace(/\[[^\]]*\]/g, " ")                                       // ranges, subqueries
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ");
  const names = new Set();
  // Numbers and durations first, so that 1e3 or 10m is no name.
  const token = /(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?:ms|[smhdwy])?)|([a-zA-Z_:][a-zA-Z0-9_:]*)/g;
  for (const m of e.matchAll(token)) {
    const name = m[2];
    if (!name || KEYWORDS.has(name.toLowerCase())) continue;
    if (/^\s*\(/.test(e.slice(m.index + name.length))) continue;  // a function or aggregation
    names.add(name);
  }
  return names;
}

// ---- 1. Rules ---------------------------------------------------------------
const rules = YAML.parse(readFileSync(rulesFile, "utf8"));
const ruleList = rules.groups.flatMap((g) => g.rules.map((r) => ({ ...r, group: g.name })));
const recorded = new Set(ruleList.filter((r) => r.record).map((r) => r.record));
const alerts = ruleList.filter((r) => r.alert).map((r) => r.alert);
// A recorded name aggregated per job: its level (before the first colon)
// starts with job_id (job_id:..., job_id_op:...).
const perJob = (name) => recorded.has(name) && /^job_id(_[a-z_]+)?:/.test(name);
{
  const check = run("promtool", ["check", "rules", rulesFile]);
  if (check.error) problem("promtool", `not found (${check.error.message}): scripts/install-deps installs it (prometheus)`);
  else if (check.status !== 0) problem("promtool check rules", check.stdout + check.stderr);
  else say(`promtool check rules: ${check.stdout.trim().split("\n").pop().trim()}`);
  const test = run("promtool", ["test", "rules", rulesTest], { cwd: join(root, "deploy/prometheus") });
  if (!check.error && test.status !== 0) problem("promtool test rules", test.stdout + test.stderr);
  else if (!check.error) say("promtool test rules: SUCCESS");
  // Every alert has a test case where it fires.
  const tests = YAML.parse(readFileSync(rulesTest, "utf8"));
  const fired = new Set(tests.tests.flatMap((t) => (t.alert_rule_test ?? [])
    .filter((a) => (a.exp_alerts ?? []).length > 0).map((a) => a.alertname)));
  const quiet = new Set(tests.tests.flatMap((t) => (t.alert_rule_test ?? [])
    .filter((a) => (a.exp_alerts ?? []).length === 0).map((a) => a.alertname)));
  for (const a of alerts) {
    if (!fired.has(a)) problem("caravela-rules.test.yaml", `no case where ${a} fires`);
    if (!quiet.has(a)) problem("caravela-rules.test.yaml", `no case where ${a} must stay quiet`);
  }
}
const ruleExprs = ruleList.map((r) => ({ where: `rule ${r.record ?? r.alert}`, expr: String(r.expr) }));

// ---- 2. Dashboard -----------------------------------------------------------
const dashboard = JSON.parse(readFileSync(dashboardFile, "utf8"));
const dashExprs = [];
let jobVarMetric = null;
{
  const vars = new Map((dashboard.templating?.list ?? []).map((v) => [v.name, v]));
  if (vars.get("datasource")?.type !== "datasource" || vars.get("datasource")?.query !== "prometheus") {
    problem("caravela.json", "no datasource variable of type prometheus");
  }
  const jobVar = vars.get("job_id");
  jobVarMetric = null;
  const jobQuery = typeof jobVar?.query === "string" ? jobVar.query : jobVar?.query?.query;
  const lv = /^label_values\(\s*([^,]+?)\s*,\s*job_id\s*\)$/.exec(jobQuery ?? "");
  if (jobVar?.type !== "query" || !lv) problem("caravela.json", `no job_id variable from label_values(METRIC, job_id) (${jobQuery})`);
  else {
    dashExprs.push({ where: "variable job_id", expr: lv[1] });
    jobVarMetric = lv[1];
  }
  const usesDs = (o) => o?.datasource?.uid === "${datasource}";
  if (jobVar && !usesDs(jobVar)) problem("caravela.json", "variable job_id does not query ${datasource}");
  const ids = new Set();
  const visit = (panels) => {
    for (const p of panels ?? []) {
      if (ids.has(p.id)) problem("caravela.json", `panel id ${p.id} twice`);
      ids.add(p.id);
      if (!p.gridPos) problem(`panel "${p.title}"`, "no gridPos");
      if (p.type === "row") {
        visit(p.panels);
        continue;
      }
      if (!usesDs(p)) problem(`panel "${p.title}"`, "datasource is not ${datasource}");
      if (!(p.targets ?? []).length) problem(`panel "${p.title}"`, "no queries");
      for (const t of p.targets ?? []) {
        const where = `panel "${p.title}" ${t.refId}`;
        if (!usesDs(t)) problem(where, "datasource is not ${datasource}");
        if (!t.expr) {
          problem(where, "no expr");
          continue;
        }
        if (/job_id/.test(t.expr) && !t.expr.includes('job_id=~"$job_id"')) problem(where, "per-job query not filtered by $job_id");
        dashExprs.push({ where, expr: t.expr });
      }
    }
  };
  visit(dashboard.panels);
  const titles = JSON.stringify(dashboard.panels.map((p) => p.title)).toLowerCase();
  for (const want of ["consumer lag", "watermark lag per partition", "records in / out", "checkpoint duration",
    "checkpoint age", "state size", "too-late", "restarts"]) {
    if (!titles.includes(want)) problem("caravela.json", `no panel "${want}"`);
  }
  // Every query is valid PromQL: promtool checks them as recording rules
  // (Grafana's variables replaced by what they stand for).
  const asRules = {
    groups: [{
      name: "dashboard",
      rules: dashExprs.map((d, i) => ({
        record: `dashboard:query:${i}`,
        expr: d.expr.replaceAll("$__rate_interval", "1m").replaceAll("$__range", "1h").replaceAll("$job_id", ".*"),
      })),
    }],
  };
  const f = join(dir, "dashboard-queries.yaml");
  writeFileSync(f, YAML.stringify(asRules));
  const r = run("promtool", ["check", "rules", f]);
  if (!r.error && r.status !== 0) problem("caravela.json queries", r.stdout + r.stderr);
  else if (!r.error) say(`dashboard: ${dashExprs.length} queries parse (promtool)`);
}
// Per-job grouping is job_id/job_name; `job` is the scrape job only.
for (const { where, expr } of [...ruleExprs, ...dashExprs]) {
  if (/\bexported_job\b/.test(expr)) problem(where, "uses exported_job: a Caravela job is job_id/job_name");
  if (/\b(by|without|on|ignoring)\s*\([^)]*\bjob\b[^)]*\)/.test(expr)) problem(where, "groups by `job` (the scrape job): use job_id/job_name");
  for (const m of expr.matchAll(/\bjob\s*(=~|!=|!~|=)\s*"([^"]*)"/g)) {
    if (m[2] !== "caravela") problem(where, `job${m[1]}"${m[2]}": \`job\` is the scrape job ("caravela"), a Caravela job is job_id`);
  }
}

// ---- 3. Kubernetes forms ----------------------------------------------------
{
  const sync = run(join(root, "deploy/prometheus/sync-k8s"), ["--check"]);
  if (sync.status !== 0) problem("deploy/prometheus/sync-k8s --check", (sync.stdout + sync.stderr).trim());
  const k8s = join(root, "deploy/k8s");
  const parseAll = (file) => YAML.parseAllDocuments(readFileSync(file, "utf8")).map((d) => d.toJS()).filter(Boolean);
  const top = readdirSync(k8s).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml").flatMap((f) => parseAll(join(k8s, f)));
  const named = (kind, name) => top.find((o) => o.kind === kind && o.metadata.name === name);
  const mon = join(k8s, "monitoring");
  const kust = YAML.parse(readFileSync(join(mon, "kustomization.yaml"), "utf8"));
  const files = readdirSync(mon).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml");
  for (const f of files) if (!kust.resources.includes(f)) problem(`monitoring/${f}`, "not listed in its kustomization.yaml");
  for (const f of kust.resources) if (!files.includes(f)) problem("monitoring/kustomization.yaml", `lists ${f}, which does not exist`);
  const objs = files.flatMap((f) => parseAll(join(mon, f)).map((o) => ({ f, o })));
  for (const { f, o } of objs) {
    if (o.metadata.namespace !== kust.namespace) problem(`monitoring/${f}`, `namespace ${o.metadata.namespace}, kustomization says ${kust.namespace}`);
    if (o.metadata.labels?.["app.kubernetes.io/part-of"] !== "caravela") problem(`monitoring/${f}`, "no label app.kubernetes.io/part-of: caravela");
    if (o.kind === "ConfigMap") {
      const { ConfigMap } = await import("kubernetes-models/v1/ConfigMap");
      try {
        new ConfigMap(o).validate();
      } catch (e) {
        problem(`monitoring/${f}`, `schema: ${e.message.split("\n")[0]}`);
      }
    }
  }
  const rule = objs.find(({ o }) => o.kind === "PrometheusRule")?.o;
  if (rule?.apiVersion !== "monitoring.coreos.com/v1") problem("monitoring", "no PrometheusRule monitoring.coreos.com/v1");
  else if (JSON.stringify(rule.spec) !== JSON.stringify(rules)) problem("monitoring/prometheusrule.yaml", "spec is not caravela-rules.yaml");
  const cmRules = named("ConfigMap", "caravela-prometheus-rules");
  if (cmRules?.data?.["caravela-rules.yaml"] !== readFileSync(rulesFile, "utf8")) {
    problem("deploy/k8s/prometheus-rules.yaml", "no ConfigMap caravela-prometheus-rules holding caravela-rules.yaml as it is");
  }
  // The plain Prometheus scrape config: loads the rules, scrape job "caravela".
  const scrape = YAML.parse(named("ConfigMap", "caravela-prometheus")?.data?.["scrape.yaml"] ?? "{}");
  const sc = scrape.scrape_configs?.[0];
  if (sc?.job_name !== "caravela") problem("prometheus.yaml", `scrape job ${sc?.job_name}, the rules expect "caravela"`);
  if (!(scrape.rule_files ?? []).some((p) => p.endsWith("/caravela-rules.yaml"))) problem("prometheus.yaml", "rule_files does not load caravela-rules.yaml");
  if (sc) {
    // Debian's promtool has no Kubernetes discovery: check the rest with static targets.
    const copy = structuredClone(scrape);
    copy.rule_files = [rulesFile];
    for (const s of copy.scrape_configs) {
      delete s.kubernetes_sd_configs;
      s.static_configs = [{ targets: ["127.0.0.1:9"] }];
      if (s.authorization?.credentials_file) {
        s.authorization.credentials_file = join(dir, "token");
        writeFileSync(join(dir, "token"), "t");
      }
    }
    writeFileSync(join(dir, "scrape-check.yaml"), YAML.stringify(copy));
    const r = run("promtool", ["check", "config", join(dir, "scrape-check.yaml")]);
    if (!r.error && r.status !== 0) problem("prometheus.yaml scrape.yaml", `promtool check config: ${r.stdout}${r.stderr}`);
  }
  // The PodMonitor: the pods it selects expose its port, its Secret exists,
  // its job label is the scrape job the rules use, same metric relabelling.
  const pm = objs.find(({ o }) => o.kind === "PodMonitor")?.o;
  if (!pm) problem("monitoring", "no PodMonitor");
  else {
    const sel = Object.entries(pm.spec.selector.matchLabels);
    const pods = top.filter((o) => ["Deployment", "StatefulSet"].includes(o.kind)).map((o) => o.spec.template)
      .filter((t) => sel.every(([k, v]) => t.metadata.labels?.[k] === v));
    const components = pods.map((t) => t.metadata.labels["app.kubernetes.io/component"]).sort();
    if (JSON.stringify(components) !== '["coordinator","worker"]') problem("PodMonitor", `selects ${components}, not the coordinator and the workers`);
    for (const ep of pm.spec.podMetricsEndpoints) {
      for (const t of pods) {
        if (!t.spec.containers.some((c) => (c.ports ?? []).some((p) => p.name === ep.port))) {
          problem("PodMonitor", `${t.metadata.labels["app.kubernetes.io/component"]} pods have no port ${ep.port}`);
        }
        if (t.metadata.labels[pm.spec.jobLabel] !== sc?.job_name) problem("PodMonitor", `jobLabel ${pm.spec.jobLabel} gives job "${t.metadata.labels[pm.spec.jobLabel]}", not "${sc?.job_name}"`);
      }
      const cred = ep.authorization?.credentials;
      const secret = named("Secret", cred?.name);
      if (!secret || !(cred.key in (secret.stringData ?? secret.data ?? {}))) problem("PodMonitor", `no Secret ${cred?.name} with key ${cred?.key}`);
      const mr = (ep.metricRelabelings ?? []).map((r) => [r.sourceLabels ?? null, r.regex ?? null, r.targetLabel ?? null, r.action ?? null]);
      const cr = (sc?.metric_relabel_configs ?? []).map((r) => [r.source_labels ?? null, r.regex ?? null, r.target_label ?? null, r.action ?? null]);
      if (JSON.stringify(mr) !== JSON.stringify(cr)) problem("PodMonitor", "metricRelabelings differ from prometheus.yaml's metric_relabel_configs");
    }
  }
  say("Kubernetes forms checked");
}

// ---- 4 and 5. Real processes ------------------------------------------------
const children = [];
// Starts `args` (dies with this process: setpriv --pdeathsig) and waits for
// `pattern` in its output: [child, match].
async function start(name, cmd, args, pattern, timeoutMs = 20000) {
  const child = spawn("setpriv", ["--pdeathsig", "KILL", cmd, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  child.name = name;
  child.log = "";
  child.stdout.on("data", (d) => (child.log += d));
  child.stderr.on("data", (d) => (child.log += d));
  children.push(child);
  const t = Date.now();
  while (Date.now() - t < timeoutMs) {
    const m = pattern.exec(child.log);
    if (m) return [child, m];
    if (child.exitCode !== null) break;
    await sleep(50);
  }
  throw new Error(`${name} did not start:\n${child.log}`);
}
async function stop(child, signal = "SIGTERM") {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill(signal);
  for (let i = 0; i < 50 && child.exitCode === null && child.signalCode === null; ++i) await sleep(100);
  if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
}
async function get(url) {
  try {
    const r = await fetch(url, { signal: AbortSignal.timeout(3000) });
    return r.ok ? await r.text() : null;
  } catch {
    return null;
  }
}
// Sample names of a /metrics text, added to `into`; those of samples with a
// job_id label also to `withJobId`.
function sampleNames(text, into, withJobId) {
  for (const line of (text ?? "").split("\n")) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)([{ ])/.exec(line);
    if (!m) continue;
    into.add(m[1]);
    if (withJobId && m[2] === "{" && /^[^}]*\bjob_id="/.test(line.slice(m[0].length))) withJobId.add(m[1]);
  }
  return into;
}
async function waitFor(what, fn, timeoutMs) {
  const t = Date.now();
  while (Date.now() - t < timeoutMs) {
    if (await fn()) return true;
    await sleep(250);
  }
  problem("cluster", `timed out waiting for ${what}`);
  return false;
}
const freePort = () => new Promise((resolve) => {
  const s = createServer();
  s.listen(0, "127.0.0.1", () => {
    const { port } = s.address();
    s.close(() => resolve(port));
  });
});

const exported = new Set();
const exportedWithJobId = new Set();  // names with a job_id label
let exitCode = 1;
try {
  const [, b] = await start("broker", binary, ["broker", "--port", "0", "--topic", "purchases:2"], /listening on (\S+)/);
  const broker = b[1];
  const [, c] = await start("coordinator", binary, ["coordinator", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
    "--data-dir", join(dir, "coordinator"), "--allow-path", dir, "--worker-timeout", "3s"],
  /caravela coordinator: grpc=(\S+) http=(\S+)/);
  const [coordinator, coordHttp] = [c[1], c[2]];
  const workers = [];
  for (const n of [1, 2]) {
    const [child, w] = await start(`worker ${n}`, binary, ["worker", "--coordinator", coordinator, "--http", "127.0.0.1:0",
      "--bootstrap", broker, "--slots", "4", "--data-dir", join(dir, `worker-${n}`), "--allow-path", dir],
    /caravela worker: id=(\S+)[\s\S]*caravela worker: grpc=\S+ http=(\S+)/);
    workers.push({ child, id: w[1], http: w[2] });
  }
  say(`broker ${broker}, coordinator ${coordinator} (http ${coordHttp}), workers http ${workers.map((w) => w.http)}`);

  // 5. A real Prometheus on them, with the rules evaluated every second.
  const promPort = await freePort();
  const prom = `http://127.0.0.1:${promPort}`;
  const scrapeConfig = YAML.parse(YAML.parse(readFileSync(join(root, "deploy/k8s/prometheus.yaml"), "utf8")).data["scrape.yaml"]).scrape_configs[0];
  writeFileSync(join(dir, "rules-1s.yaml"), YAML.stringify({ groups: rules.groups.map((g) => ({ ...g, interval: "1s" })) }));
  writeFileSync(join(dir, "prometheus.yaml"), YAML.stringify({
    global: { scrape_interval: "1s", evaluation_interval: "1s" },
    rule_files: [join(dir, "rules-1s.yaml")],
    scrape_configs: [{
      job_name: scrapeConfig.job_name,
      static_configs: [{ targets: [coordHttp], labels: { component: "coordinator" } },
        { targets: workers.map((w) => w.http), labels: { component: "worker" } }],
      metric_relabel_configs: scrapeConfig.metric_relabel_configs,
    }],
  }));
  await start("prometheus", "prometheus", [`--config.file=${join(dir, "prometheus.yaml")}`,
    `--storage.tsdb.path=${join(dir, "tsdb")}`, `--web.listen-address=127.0.0.1:${promPort}`],
  /Server is ready to receive web requests/);
  say(`prometheus ${prom}`);

  // A job over the 2-partition topic; records on both partitions.
  const job = join(dir, "job.yaml");
  writeFileSync(job, `apiVersion: caravela/v1
kind: Job
metadata: {name: monitoring-probe}
spec:
  checkpoint: {interval: 1s}
  sources:
    - name: purchases
      kafka: {topic: purchases}
      event_time: {field: ts, format: epoch_ms}
      watermark: {max_out_of_orderness: 1m}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 1h}
    - name: revenue
      window: {from: unique, tumbling: 1h, group_by: [country], aggregates: [{as: orders, count: "*"}], allowed_lateness: 1m}
  sinks:
    - {from: revenue, file: {path: ${join(dir, "out/revenue.jsonl")}}}
    - {from: revenue.too_late, file: {path: ${join(dir, "out/too_late.jsonl")}}}
`);
  for (const p of [0, 1]) {
    const lines = [];
    for (let i = 0; i < 20; ++i) lines.push(JSON.stringify({ event_id: `e${p}-${i}`, country: "PT", ts: 1700000000000 + i * 600000 }));
    lines.push(JSON.stringify({ event_id: `late-${p}`, country: "PT", ts: 1700000000000 }));  // too late
    lines.push("not json");  // invalid
    const r = run("kcat", ["-b", broker, "-t", "purchases", "-p", String(p), "-P"], { input: lines.join("\n") + "\n" });
    if (r.status !== 0) throw new Error(`kcat: ${r.error?.message ?? ""}${r.stderr}`);
  }
  const submit = run(binary, ["submit", job, "--coordinator", coordinator]);
  if (submit.status !== 0) throw new Error(`caravela submit: ${submit.stdout}${submit.stderr}`);
  const jobId = submit.stdout.trim().split("\n").pop();
  say(`job ${jobId} submitted`);

  const scrapeAll = async () => {
    const texts = await Promise.all([coordHttp, ...workers.map((w) => w.http)].map((h) => get(`http://${h}/metrics`)));
    texts.forEach((t) => sampleNames(t, exported, exportedWithJobId));
    return texts;
  };
  // Running: the coordinator has the job's checkpoint age, the workers its
  // partitions' and operators' watermarks and state.
  await waitFor("a checkpoint and watermarks", async () => {
    const [coord, ...ws] = await scrapeAll();
    const w = ws.join("\n");
    return /caravela_job_checkpoint_age_seconds\{/.test(coord ?? "") && /caravela_operator_watermark_seconds\{/.test(w) &&
      /caravela_source_partition_watermark_seconds\{/.test(w) && /caravela_state_bytes\{/.test(w);
  }, 25000);
  say("job running: checkpoint and watermarks exported");
  // Prometheus records the job's consumer lag under its job_id.
  const api = async (path) => JSON.parse((await get(`${prom}/api/v1/${path}`)) ?? '{"data":null}').data;
  let lag = [];
  await waitFor(`Prometheus: job_id:caravela_source_lag_records:sum{job_id="${jobId}"}`, async () => {
    lag = (await api(`query?query=${encodeURIComponent("job_id:caravela_source_lag_records:sum")}`))?.result ?? [];
    return lag.some((s) => s.metric.job_id === jobId);
  }, 15000);
  say(`prometheus: recorded lag ${JSON.stringify(lag.map((s) => s.metric))}`);
  // The records the job reads per second (caravela_records_in_total over
  // its workers), which the watermark alerts are gated on.
  let readRate = [];
  await waitFor(`Prometheus: job_id:caravela_records_in:rate5m{job_id="${jobId}"}`, async () => {
    readRate = (await api(`query?query=${encodeURIComponent("job_id:caravela_records_in:rate5m")}`))?.result ?? [];
    return readRate.some((s) => s.metric.job_id === jobId && s.metric.job_name === "monitoring-probe");
  }, 15000);
  say(`prometheus: recorded records in ${JSON.stringify(readRate.map((s) => [s.metric, s.value[1]]))}`);
  // Too-late records per job and operator (the probe sends one per partition).
  let tooLate = [];
  await waitFor(`Prometheus: job_id_op:caravela_too_late_records:rate5m{job_id="${jobId}",op="revenue"}`, async () => {
    tooLate = (await api(`query?query=${encodeURIComponent("job_id_op:caravela_too_late_records:rate5m")}`))?.result ?? [];
    return tooLate.some((s) => s.metric.job_id === jobId && s.metric.op === "revenue");
  }, 15000);
  say(`prometheus: recorded too-late ${JSON.stringify(tooLate.map((s) => s.metric))}`);
  // The operator watermarks CaravelaWatermarkStuck and the dashboard select by job_id.
  const byJob = `caravela_operator_watermark_seconds{job_id="${jobId}",job_name="monitoring-probe"}`;
  let tasks = [];
  await waitFor(`Prometheus: ${byJob}`, async () => {
    tasks = (await api(`query?query=${encodeURIComponent(byJob)}`))?.result ?? [];
    return tasks.length > 0;
  }, 15000);
  say(`prometheus: operator watermarks of ${jobId}: ${JSON.stringify(tasks.map((s) => [s.metric.op, s.metric.task, s.metric.instance]))}`);
  // On the workers, the job's series carry its job_id and job_name before
  // their own labels (a scoped registry per job); the worker's own series
  // (gRPC, exchange transport, process) none.
  {
    const text = (await Promise.all(workers.map((w) => get(`http://${w.http}/metrics`)))).join("\n");
    const scope = `{job_id="${jobId}",job_name="monitoring-probe"`;
    for (const family of ["caravela_records_in_total", "caravela_operator_records_in_total", "caravela_too_late_total",
      "caravela_operator_watermark_seconds", "caravela_source_partition_offset", "caravela_state_bytes",
      "caravela_checkpoint_last_id"]) {
      const lines = text.split("\n").filter((l) => l.startsWith(family + "{") || l.startsWith(family + " "));
      if (!lines.some((l) => l.startsWith(family + scope))) problem(`worker /metrics ${family}`, `no series starting with ${scope}`);
      for (const l of lines) if (!/^[^{ ]+\{job_id="[^"]*",job_name="[^"]*"/.test(l)) problem(`worker /metrics ${family}`, `without job_id, job_name first: ${l}`);
    }
  }

  // A worker lost (one that runs a task of the job): the coordinator
  // declares it dead and restarts the job on the other from its last
  // checkpoint.
  const shown = run(binary, ["job", jobId, "--coordinator", coordinator]).stdout;
  const holder = /^\s*\d+\s+\d+\s+\d+\s+(\S+)\s+TASK_RUNNING/m.exec(shown)?.[1];
  const victim = workers.find((w) => w.id === holder);
  if (!victim) throw new Error(`no task of ${jobId} on ${workers.map((w) => w.id)}:\n${shown}`);
  const survivor = workers.find((w) => w !== victim);
  await stop(victim.child, "SIGKILL");
  say(`${victim.id} killed (it ran tasks of ${jobId})`);
  await waitFor("the coordinator to restart the job (recoveries, restores, a checkpoint again)", async () => {
    const [coord, ...ws] = await scrapeAll();
    return /caravela_scheduler_recoveries_total [1-9]/.test(coord ?? "") && /caravela_coordinator_workers\{state="DEAD"\} [1-9]/.test(coord ?? "") &&
      new RegExp(`^caravela_restores_total\\{job_id="${jobId.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}",[^}]*\\} [1-9]`, "m").test(ws[workers.indexOf(survivor)] ?? "") && /caravela_job_checkpoint_age_seconds\{/.test(coord ?? "");
  }, 30000);
  say(`restarted: ${exported.size} metric names exported over the run`);

  // 4. Every name the rules and the dashboard use.
  const used = new Map();  // name -> where
  for (const { where, expr } of [...ruleExprs, ...dashExprs]) {
    for (const n of metricNames(expr)) {
      if (!used.has(n)) used.set(n, new Set());
      used.get(n).add(where);
    }
  }
  const PROMETHEUS_MADE = new Set(["up"]);
  const missing = [];
  for (const [n, where] of [...used].sort()) {
    if (exported.has(n) || recorded.has(n) || PROMETHEUS_MADE.has(n)) continue;
    missing.push(n);
    problem(`metric ${n}`, `not exported by the coordinator or the workers (used by ${[...where].join(", ")})`);
  }
  // A selector on job_id names a series that has one.
  for (const { where, expr } of [...ruleExprs, ...dashExprs]) {
    const e = expr.replace(/"(?:[^"\\]|\\.)*"/g, '""');
    for (const m of e.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}/g)) {
      if (/\bjob_id\b/.test(m[2]) && !exportedWithJobId.has(m[1]) && !perJob(m[1])) {
        problem(where, `matches job_id on ${m[1]}, which is exported without a job_id label`);
      }
    }
  }
  // A query that groups or matches on job_id uses only series that have one
  // (any other would count under an empty job_id, or match nothing).
  for (const { where, expr } of [...ruleExprs, ...dashExprs]) {
    if (!/\bjob_id\b/.test(expr)) continue;
    for (const n of metricNames(expr)) {
      if (recorded.has(n) ? !perJob(n) : (exported.has(n) && !exportedWithJobId.has(n))) {
        problem(where, `uses job_id with ${n}, which has no job_id label`);
      }
    }
  }
  // The dashboard filters every series that has a job_id by $job_id.
  for (const { where, expr } of dashExprs) {
    if (where === "variable job_id") continue;
    for (const n of metricNames(expr)) {
      if (!exportedWithJobId.has(n) && !perJob(n)) continue;
      const esc = n.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
      for (const m of expr.matchAll(new RegExp(`(?<![a-zA-Z0-9_:])${esc}(?![a-zA-Z0-9_:])\\s*(\\{[^}]*\\})?`, "g"))) {
        if (!(m[1] ?? "").includes('job_id=~"$job_id"')) problem(where, `${n} not filtered by job_id=~"$job_id"`);
      }
    }
  }
  if (jobVarMetric && !exportedWithJobId.has(jobVarMetric)) problem("variable job_id", `label_values of ${jobVarMetric}, which is exported without a job_id label`);
  say(`exported with a job_id label: ${[...exportedWithJobId].sort().join(", ")}`);
  const metricsUsed = [...used.keys()].filter((n) => !recorded.has(n) && !PROMETHEUS_MADE.has(n)).sort();
  say(`${metricsUsed.length} exported metric names used by the rules and the dashboard, ${missing.length} missing:\n  ${metricsUsed.join("\n  ")}`);
  for (const r of recorded) if (![...used.keys()].includes(r) && !dashExprs.some((d) => d.expr.includes(r))) say(`note: ${r} is recorded but used by no alert or panel`);

  // 5. What the real Prometheus made of it.
  await waitFor(`Prometheus: rules evaluated, CaravelaJobRestarted firing, CaravelaTargetDown pending for ${victim.id}`, async () => {
    const a = (await api("alerts"))?.alerts ?? [];
    return a.some((x) => x.labels.alertname === "CaravelaJobRestarted" && x.state === "firing") &&
      a.some((x) => x.labels.alertname === "CaravelaTargetDown" && x.labels.instance === victim.http);
  }, 15000);
  const groups = (await api("rules"))?.groups ?? [];
  const evaluated = groups.flatMap((g) => g.rules);
  if (evaluated.length !== ruleList.length) problem("prometheus", `loaded ${evaluated.length} rules, the file has ${ruleList.length}`);
  for (const r of evaluated) if (r.health !== "ok") problem(`prometheus rule ${r.name}`, `health ${r.health}: ${r.lastError}`);
  const active = ((await api("alerts"))?.alerts ?? []).map((x) => `${x.labels.alertname}(${x.state}${x.labels.instance ? " " + x.labels.instance : ""})`);
  say(`prometheus: ${evaluated.length} rules healthy; alerts ${active.join(", ")}`);
  exitCode = problems.length === 0 ? 0 : 1;
} catch (e) {
  problem("error", e.stack || String(e));
  for (const c of children) console.error(`--- ${c.name}:\n${c.log.slice(-3000)}`);
} finally {
  for (const c of children.reverse()) await stop(c);
  rmSync(dir, { recursive: true, force: true });
}
for (const p of problems) console.log(p);
console.log(`${problems.length} problem${problems.length === 1 ? "" : "s"} in the rules and the dashboard (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
process.exit(problems.length > 0 ? 1 : exitCode);
