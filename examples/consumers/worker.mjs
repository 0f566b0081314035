// A dq consumer in Node (18+, built-in fetch): reserve (long-poll), work, ack or nack.
// Waits and retries while dq is unreachable or busy; stops on a refused key.
const DQ = process.env.DQ ?? "http://127.0.0.1:7070";
const KEY = process.env.DQ_TOKEN; // an API key, when dq requires one
const idleExit = process.env.EXIT_WHEN_IDLE === "1"; // for tests: stop when nothing is due
const headers = { "content-type": "application/json", ...(KEY ? { authorization: `Bearer ${KEY}` } : {}) };
const sleep = (s) => new Promise((r) => setTimeout(r, s * 1000));

// The response, or null when dq was not reached (an ack or nack lost is fine:
// the job comes back after its lease).
const call = (path, body) =>
  fetch(DQ + path, { method: "POST", headers, body: JSON.stringify(body) }).catch(() => null);

async function closeIfUnpaid(order) { // your work; must be idempotent
  if (order < 0) throw new Error(`no such order ${order}`);
  console.log(`closed order ${order}`);
}

let backoff = 1;
for (;;) {
  const r = await call("/v1/reserve",
    { topics: ["orders"], max: 10, wait_ms: idleExit ? 1000 : 30000, lease_ms: 60000 });
  const status = r?.status ?? 0;
  if (status >= 400 && status < 500 && status !== 429) { // a refused key or a bad request: retrying won't help
    console.error(`dq refused the reserve (${status}): ${await r.text()}`);
    process.exit(1);
  }
  if (status !== 200) { // dq down, restarting or busy: wait, try again
    const wait = Number(r?.headers.get("retry-after") ?? backoff);
    console.error(`reserve failed (${status || "dq unreachable"}), retrying in ${wait} s`);
    await sleep(wait);
    backoff = Math.min(backoff * 2, 30);
    continue;
  }
  backoff = 1;
  const { jobs } = await r.json();
  if (idleExit && jobs.length === 0) break;
  for (const job of jobs) {
    const url = `/v1/topics/orders/jobs/${encodeURIComponent(job.id)}`;
    try {
      await closeIfUnpaid(job.body.order);
      await call(`${url}/ack`, { token: job.token });
    } catch (e) {
      await call(`${url}/nack`, { token: job.token, error: e.message });
    }
  }
}
