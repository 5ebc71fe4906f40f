// Offline checks of the Dockerfile and deploy/k8s (issue: operate it).
//
//   node tests/deploy/check_deploy.mjs REPO_ROOT CARAVELA_BINARY
//
// 1. Every Kubernetes object in deploy/k8s validates against the Kubernetes
//    schemas (kubernetes-models), and kustomization.yaml lists every file.
// 2. The objects agree with each other and with the binary: images, ports
//    and probes, volumes and claims, the Secret and ConfigMaps they name,
//    $(VAR)s in args, Service selectors and target ports, the PDB selector,
//    every subcommand and flag in args (`caravela <cmd> --help`), the job
//    YAML (`caravela validate`).
// 3. The Dockerfile passes dockerfilelint, runs as the user the manifests
//    expect, and its runtime stage installs every shared library
//    `ldd caravela` needs (by Debian package, dependencies included).
// Prints each problem and "N problems" at the end; exit 1 if any.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { createRequire } from "node:module";
import YAML from "yaml";

const [root, binary] = process.argv.slice(2);
if (!root || !binary) {
  console.error("usage: check_deploy.mjs REPO_ROOT CARAVELA_BINARY");
  process.exit(2);
}
const problems = [];
const problem = (where, what) => problems.push(`${where}: ${what}`);
const k8s = join(root, "deploy/k8s");

// ---- 1. Schemas -----------------------------------------------------------
const kustomization = YAML.parse(readFileSync(join(k8s, "kustomization.yaml"), "utf8"));
const files = readdirSync(k8s).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml");
for (const f of files) {
  if (!kustomization.resources.includes(f)) problem(f, "not listed in kustomization.yaml");
}
for (const r of kustomization.resources) {
  if (!files.includes(r)) problem("kustomization.yaml", `lists ${r}, which does not exist`);
}
const objects = [];
for (const f of files) {
  for (const doc of YAML.parseAllDocuments(readFileSync(join(k8s, f), "utf8"))) {
    if (doc.errors.length > 0) problem(f, `YAML: ${doc.errors[0].message}`);
    const o = doc.toJS();
    if (o) objects.push({ file: f, o });
  }
}
for (const { file, o } of objects) {
  const where = `${file} ${o.kind}/${o.metadata?.name}`;
  const [group, version] = o.apiVersion.includes("/") ? o.apiVersion.split("/") : ["", o.apiVersion];
  const path = group ? `kubernetes-models/${group}/${version}/${o.kind}` : `kubernetes-models/${version}/${o.kind}`;
  let Model;
  try {
    Model = (await import(path))[o.kind];
  } catch (e) {
    problem(where, `unknown kind ${o.apiVersion} ${o.kind}`);
    continue;
  }
  try {
    new Model(o).validate();
  } catch (e) {
    problem(where, `schema: ${e.message.split("\n")[0]}`);
  }
  if (o.kind !== "Namespace" && o.metadata.namespace !== kustomization.namespace) {
    problem(where, `namespace ${o.metadata.namespace}, kustomization says ${kustomization.namespace}`);
  }
  if (o.metadata.labels?.["app.kubernetes.io/part-of"] !== "caravela") {
    problem(where, "no label app.kubernetes.io/part-of: caravela");
  }
}

// ---- 2. Consistency -------------------------------------------------------
const named = (kind) => new Map(objects.filter(({ o }) => o.kind === kind).map(({ o }) => [o.metadata.name, o]));
const configMaps = named("ConfigMap");
const secrets = named("Secret");
const claims = named("PersistentVolumeClaim");
const services = named("Service");
const images = new Set(kustomization.images.map((i) => i.name));
const helpCache = new Map();
const help = (cmd) => {
  if (!helpCache.has(cmd)) {
    const r = spawnSync(binary, [cmd, "--help"], { encoding: "utf8" });
    helpCache.set(cmd, r.status === 0 ? r.stdout : null);
  }
  return helpCache.get(cmd);
};
const dockerfile = readFileSync(join(root, "Dockerfile"), "utf8");
const dockerUser = /^USER\s+(\d+)/m.exec(dockerfile)?.[1];

// A workload's pod template (a CronJob's is in its Job template).
const podTemplate = (o) => (o.kind === "CronJob" ? o.spec.jobTemplate.spec.template : o.spec.template);
const workloads = objects.filter(({ o }) => ["Deployment", "StatefulSet", "Job", "CronJob"].includes(o.kind));
for (const { file, o } of workloads) {
  const where = `${file} ${o.kind}/${o.metadata.name}`;
  const template = podTemplate(o);
  const pod = template.spec;
  const labels = template.metadata?.labels ?? {};
  if (o.spec.selector) {
    for (const [k, v] of Object.entries(o.spec.selector.matchLabels)) {
      if (labels[k] !== v) problem(where, `selector ${k}=${v} does not match its pod template`);
    }
  }
  if (String(pod.securityContext?.runAsUser) !== dockerUser || pod.securityContext?.runAsNonRoot !== true) {
    problem(where, `runs as ${pod.securityContext?.runAsUser}, the image's USER is ${dockerUser} (and non-root)`);
  }
  const volumes = new Map((pod.volumes ?? []).map((v) => [v.name, v]));
  for (const t of o.spec.volumeClaimTemplates ?? []) volumes.set(t.metadata.name, { pvcTemplate: true });
  for (const v of pod.volumes ?? []) {
    if (v.persistentVolumeClaim && !claims.has(v.persistentVolumeClaim.claimName)) {
      problem(where, `volume ${v.name}: no PersistentVolumeClaim ${v.persistentVolumeClaim.claimName}`);
    }
    if (v.secret && !secrets.has(v.secret.secretName)) problem(where, `volume ${v.name}: no Secret ${v.secret.secretName}`);
    if (v.configMap && !configMaps.has(v.configMap.name)) problem(where, `volume ${v.name}: no ConfigMap ${v.configMap.name}`);
  }
  for (const c of pod.containers) {
    const cw = `${where} container ${c.name}`;
    if (!images.has(c.image)) problem(cw, `image ${c.image} is not the kustomization's (${[...images]})`);
    if (!c.resources?.requests || !c.resources?.limits) problem(cw, "no resource requests and limits");
    // Environment: its own env and the ConfigMaps it takes whole.
    const env = new Set((c.env ?? []).map((e) => e.name));
    for (const ef of c.envFrom ?? []) {
      const cm = configMaps.get(ef.configMapRef?.name);
      if (!cm) problem(cw, `envFrom: no ConfigMap ${ef.configMapRef?.name}`);
      else Object.keys(cm.data).forEach((k) => env.add(k));
    }
    const args = c.args ?? [];
    for (const a of args) {
      for (const m of a.matchAll(/\$\((\w+)\)/g)) {
        if (!env.has(m[1])) problem(cw, `args use $(${m[1]}), which its environment does not define`);
      }
    }
    // The subcommand and every flag exist in the binary.
    const text = help(args[0]);
    if (text === null) problem(cw, `\`caravela ${args[0]} --help\` fails: no such subcommand`);
    for (const a of args.slice(1).filter((x) => x.startsWith("--"))) {
      const flag = a.split("=")[0];
      if (text && !new RegExp(`(^|[\\s,])${flag}\\b`).test(text)) problem(cw, `caravela ${args[0]} has no ${flag}`);
    }
    // Mounts name volumes; the token file lies in a mounted Secret's keys.
    const mounts = new Map();
    for (const m of c.volumeMounts ?? []) {
      if (!volumes.has(m.name)) problem(cw, `mount ${m.mountPath}: no volume ${m.name}`);
      mounts.set(m.mountPath, volumes.get(m.name));
    }
    for (const a of args.filter((x) => x.startsWith("--token-file="))) {
      const path = a.split("=")[1];
      const v = mounts.get(dirname(path));
      const secret = v?.secret && secrets.get(v.secret.secretName);
      if (!secret) problem(cw, `${path} is not in a mounted Secret`);
      else if (!(basename(path) in (secret.stringData ?? secret.data ?? {}))) {
        problem(cw, `Secret ${secret.metadata.name} has no key ${basename(path)}`);
      }
    }
    for (const a of args.filter((x) => /^--[\w-]+=\//.test(x) && !x.startsWith("--token-file="))) {
      const path = a.split("=")[1];
      if (![...mounts.keys()].some((m) => path === m || path.startsWith(m + "/"))) {
        problem(cw, `${a}: ${path} is on no mounted volume`);
      }
    }
    // Probes reach a declared port, the one it listens on.
    const ports = new Map((c.ports ?? []).map((p) => [p.name, p.containerPort]));
    const listen = args.find((x) => x.startsWith("--listen="));
    for (const probe of ["readinessProbe", "livenessProbe"]) {
      if (o.kind === "Job" || o.kind === "CronJob") continue;
      const p = c[probe];
      if (!p) {
        problem(cw, `no ${probe}`);
        continue;
      }
      const port = p.grpc?.port ?? p.httpGet?.port ?? p.tcpSocket?.port;
      if (![...ports.values()].includes(port) && !ports.has(port)) problem(cw, `${probe} port ${port} is not a container port`);
      if (p.grpc && listen && !listen.endsWith(`:${p.grpc.port}`)) problem(cw, `${probe} probes ${p.grpc.port}, it listens on ${listen}`);
    }
    for (const a of args.filter((x) => /^--(listen|http)=/.test(x))) {
      const port = Number(a.split(":").pop());
      if (![...ports.values()].includes(port)) problem(cw, `${a}: port ${port} is not a container port`);
    }
  }
  // Services selecting these pods target their named ports.
  for (const s of services.values()) {
    const sel = Object.entries(s.spec.selector ?? {});
    if (sel.length === 0 || !sel.every(([k, v]) => labels[k] === v)) continue;
    const names = new Map(pod.containers.flatMap((c) => (c.ports ?? []).map((p) => [p.name, p.containerPort])));
    for (const p of s.spec.ports) {
      if (typeof p.targetPort === "string" && !names.has(p.targetPort)) {
        problem(`Service/${s.metadata.name}`, `targetPort ${p.targetPort} is no port of ${o.metadata.name}`);
      } else if (names.get(p.targetPort ?? p.port) !== undefined && names.get(p.targetPort) !== p.port) {
        problem(`Service/${s.metadata.name}`, `port ${p.port} maps to ${p.targetPort}=${names.get(p.targetPort)}`);
      }
    }
    s.selectsSomething = true;
  }
}
for (const s of services.values()) {
  if (!s.selectsSomething) problem(`Service/${s.metadata.name}`, "selects no pod template");
}
for (const { o } of objects.filter(({ o }) => o.kind === "PodDisruptionBudget")) {
  const sel = Object.entries(o.spec.selector.matchLabels);
  const hit = workloads.some(({ o: w }) => sel.every(([k, v]) => podTemplate(w).metadata?.labels?.[k] === v));
  if (!hit) problem(`PodDisruptionBudget/${o.metadata.name}`, "selects no pod template");
}
// The coordinator's address the CLI and workers use is its Service.
const address = configMaps.get("caravela-config")?.data?.CARAVELA_COORDINATOR ?? "";
const [svcName, svcPort] = address.split(":");
if (!services.get(svcName)?.spec.ports.some((p) => String(p.port) === svcPort)) {
  problem("caravela-config", `CARAVELA_COORDINATOR ${address} is no Service port`);
}
// Every job YAML shipped in a ConfigMap is valid.
const tmp = mkdtempSync(join(tmpdir(), "caravela-deploy-"));
for (const cm of configMaps.values()) {
  for (const [key, text] of Object.entries(cm.data ?? {})) {
    if (!/^\s*(#.*\n\s*)*apiVersion: caravela\/v1/m.test(text)) continue;
    writeFileSync(join(tmp, key), text);
    const r = spawnSync(binary, ["validate", join(tmp, key)], { encoding: "utf8" });
    if (r.status !== 0) problem(`ConfigMap/${cm.metadata.name} ${key}`, `caravela validate: ${r.stdout}${r.stderr}`);
  }
}
rmSync(tmp, { recursive: true, force: true });

// ---- 3. Dockerfile --------------------------------------------------------
const require = createRequire(import.meta.url);
const dockerfilelint = require("dockerfilelint");
for (const item of dockerfilelint.run(join(root, "tests/deploy"), dockerfile)) {
  problem(`Dockerfile:${item.line}`, `dockerfilelint ${item.rule}: ${item.title}`);
}
for (const [re, what] of [
  [/^HEALTHCHECK\s/m, "a HEALTHCHECK"],
  [/^ENTRYPOINT\s+\["caravela"\]/m, 'ENTRYPOINT ["caravela"]'],
  [/^FROM\s+debian:12\S*\s+AS\s+build/m, "a Debian 12 build stage"],
  [/^FROM\s+debian:12-slim\s+AS\s+runtime/m, "a debian:12-slim runtime stage"],
]) {
  if (!re.test(dockerfile)) problem("Dockerfile", `no ${what}`);
}
// The runtime stage's packages, and what they pull in.
const runtime = dockerfile.slice(dockerfile.search(/^FROM\s+debian:12-slim/m));
// The RUN instruction's logical line (continuations joined), from
// "apt-get install" to the next "&&".
const logical = runtime.replace(/\\\n/g, " ");
const install = /apt-get install([^&\n]*)/.exec(logical)?.[1] ?? "";
const listed = install.split(/\s+/).filter((w) => /^[a-z0-9][a-z0-9.+-]+$/.test(w));
if (listed.length === 0) problem("Dockerfile", "the runtime stage installs no packages (apt-get install)");
const dpkg = (args) => {
  const r = spawnSync("dpkg-query", args, { encoding: "utf8" });
  return r.status === 0 ? r.stdout : "";
};
const closure = new Set();
const visit = (pkg) => {
  const name = pkg.split(":")[0];
  if (closure.has(name)) return;
  closure.add(name);
  const depends = dpkg(["-W", "-f=${Depends},${Pre-Depends}", name]);
  for (const alt of depends.split(",")) {
    const dep = alt.trim().split(/[\s|(]/)[0];
    if (dep) visit(dep);
  }
};
listed.forEach(visit);
const ldd = execFileSync("ldd", [binary], { encoding: "utf8" });
for (const line of ldd.split("\n")) {
  const lib = /=>\s+(\/\S+)/.exec(line)?.[1];
  if (!lib) continue;
  let owner = "";
  for (const p of [lib, lib.replace(/^\/usr/, ""), execFileSync("readlink", ["-f", lib], { encoding: "utf8" }).trim()]) {
    const r = spawnSync("dpkg", ["-S", p], { encoding: "utf8" });
    if (r.status === 0) {
      owner = r.stdout.split(":")[0];
      break;
    }
  }
  if (!owner) {
    problem("Dockerfile", `${lib} (needed by caravela) belongs to no Debian package`);
    continue;
  }
  const priority = dpkg(["-W", "-f=${Priority}", owner]).trim();
  if (closure.has(owner) || priority === "required") continue;
  problem("Dockerfile", `the runtime stage lacks ${owner} (for ${basename(lib)})`);
}

for (const p of problems) console.log(p);
console.log(`${problems.length} problem${problems.length === 1 ? "" : "s"} in Dockerfile and deploy/k8s (${objects.length} objects)`);
process.exit(problems.length > 0 ? 1 : 0);
