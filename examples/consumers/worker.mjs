// A dq consumer in Node (18+, built-in fetch): reserve (long-poll), work, ack or nack.
const DQ = process.env.DQ ?? "http://127.0.0.1:7070";
const idleExit = process.env.EXIT_WHEN_IDLE === "1"; // for tests: stop when nothing is due

const call = async (path, body) =>
  (await fetch(DQ + path, { method: "POST", headers: { "content-type": "application/json" },
                            body: JSON.stringify(body) })).json();

async function closeIfUnpaid(order) { // your work; must be idempotent
  if (order < 0) throw new Error(`no such order ${order}`);
  console.log(`closed order ${order}`);
}

for (;;) {
  const { jobs } = await call("/v1/reserve",
    { topics: ["orders"], max: 10, wait_ms: idleExit ? 1000 : 30000, lease_ms: 60000 });
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
