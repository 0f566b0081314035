/** Test fixtures: a `dq serve` of our own per suite, on a free port, killed after (also on failure). */

import { type ChildProcess, spawn } from "node:child_process";
import * as http from "node:http";
import * as https from "node:https";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";

const here = path.dirname(fileURLToPath(import.meta.url)); // <root>/clients/node/dist/test
export const repoRoot = path.resolve(here, "../../../..");
export const nodeDir = path.resolve(here, "../..");

export function dqBin(): string {
  const bin = process.env.DQ_BIN || path.join(repoRoot, "target/debug/dq");
  if (!existsSync(bin)) {
    throw new Error(`dq binary not found at ${bin}: build it (cargo build -p dq-cli) or set DQ_BIN`);
  }
  return bin;
}

/** The stores every server-starting test runs on: embedded, and Redis when DQ_TEST_REDIS_URL is set. */
export const stores: Array<{ name: string; redis?: string }> = [
  { name: "embedded" },
  ...(process.env.DQ_TEST_REDIS_URL ? [{ name: "redis", redis: process.env.DQ_TEST_REDIS_URL }] : []),
];

const children = new Set<ChildProcess>();
function killChildren(): void {
  for (const c of children) {
    try {
      c.kill("SIGKILL");
    } catch {
      /* gone */
    }
  }
}
process.on("exit", killChildren);
// The test process itself stopped (the runner's timeout, ^C): no dq serve left behind.
for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"] as const) {
  process.once(sig, () => {
    killChildren();
    process.exit(1);
  });
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

/** A unique name (topic, id) for this test run. */
export function unique(prefix: string): string {
  return `${prefix}-${randomBytes(5).toString("hex")}`;
}

/** Polls `cond` every `everyMs` until it holds or `timeoutMs` passes (then throws `what`). */
export async function waitFor(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 10_000, everyMs = 25): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** GET `url` (certificate not checked); the status, or 0 when it cannot connect. */
function status(url: string): Promise<number> {
  return new Promise((resolve) => {
    const mod = url.startsWith("https:") ? https : http;
    const req = mod.get(url, { rejectUnauthorized: false, agent: false }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
    });
    req.on("error", () => resolve(0));
    req.setTimeout(2000, () => req.destroy());
  });
}

export class DqServer {
  readonly url: string;
  private child: ChildProcess | null = null;
  private output = "";

  private constructor(
    readonly port: number,
    readonly dataDir: string,
    readonly redis: string | undefined,
  ) {
    this.url = `http://127.0.0.1:${port}`;
  }

  /** Starts `dq serve`; with `tls` (PEM files) it speaks HTTPS. */
  static async start(store: { redis?: string }, extraArgs: string[] = [], tls?: { cert: string; key: string }): Promise<DqServer> {
    dqBin(); // fails clearly before anything is made
    const s = new DqServer(await freePort(), mkdtempSync(path.join(tmpdir(), "dq-node-test-")), store.redis);
    if (tls) {
      (s as { url: string }).url = `https://127.0.0.1:${s.port}`;
      extraArgs = [...extraArgs, "--tls-cert", tls.cert, "--tls-key", tls.key];
    }
    s.extraArgs = extraArgs;
    try {
      await s.spawn();
    } catch (e) {
      await s.stop();
      throw e;
    }
    return s;
  }

  private extraArgs: string[] = [];

  private async spawn(): Promise<void> {
    const args = [
      "serve",
      "--listen",
      `127.0.0.1:${this.port}`,
      "--config",
      "/dev/null",
      "--shutdown-grace",
      "3s",
      "--log-level",
      "warn",
      ...(this.redis ? ["--redis", this.redis, "--redis-timeout", "1s"] : ["--data-dir", this.dataDir]),
      ...this.extraArgs,
    ];
    const child = spawn(dqBin(), args, { stdio: ["ignore", "pipe", "pipe"] });
    children.add(child);
    this.child = child;
    this.output = "";
    child.stdout!.on("data", (d: Buffer) => (this.output = (this.output + d.toString()).slice(-4000)));
    child.stderr!.on("data", (d: Buffer) => (this.output = (this.output + d.toString()).slice(-4000)));
    child.on("exit", () => children.delete(child));
    const until = Date.now() + 20_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`dq serve exited (${child.exitCode}): ${this.output}`);
      if ((await status(`${this.url}/readyz`)) === 200) return;
      if (Date.now() > until) throw new Error(`dq serve not ready within 20 s: ${this.output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** Kills the server (SIGKILL: as a crash) and waits for it to be gone. */
  async kill(signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    const c = this.child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const gone = new Promise<void>((r) => c.once("exit", () => r()));
    c.kill(signal);
    await gone;
    this.child = null;
  }

  /** Starts it again on the same port and data. */
  async restart(): Promise<void> {
    await this.kill();
    await this.spawn();
  }

  async stop(): Promise<void> {
    await this.kill("SIGKILL");
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
