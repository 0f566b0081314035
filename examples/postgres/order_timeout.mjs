// The order-timeout flow on dq's PostgreSQL store, in Node (pg): the order
// and its timeout are written in one transaction, and so are the payment
// and the cancel of the timeout.
//   node order_timeout.mjs place 42 [delay-seconds]   # order + timeout, committed
//   node order_timeout.mjs place-and-fail 42          # order + timeout, rolled back
//   node order_timeout.mjs pay 42                     # paid + timeout cancelled
// DATABASE_URL: postgres://app:secret@db:5432/shop (a role granted dq_enqueue).
import pg from "pg";

const db = new pg.Client({ connectionString: process.env.DATABASE_URL ?? "postgres://app@127.0.0.1:5432/shop" });
await db.connect();
await db.query("CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL)");

const [verb, order, seconds] = process.argv.slice(2);
const delay = Number(seconds ?? 1800); // 30 minutes to pay
const job = `close-order-${order}`; // one timeout per order: dq.enqueue is idempotent by id

async function place() {
  await db.query("INSERT INTO orders (id, status) VALUES ($1, 'unpaid')", [order]);
  const r = await db.query("SELECT due_at FROM dq.enqueue('orders', $1, $2, make_interval(secs => $3))",
    [job, JSON.stringify({ order: Number(order) }), delay]);
  return r.rows[0].due_at;
}

if (verb === "place") {
  await db.query("BEGIN");
  const due = await place();
  await db.query("COMMIT"); // the order and its timeout exist from here on, together
  console.log(`placed order ${order}; ${job} due at ${due.toISOString()}`);
} else if (verb === "place-and-fail") {
  await db.query("BEGIN");
  try {
    await place();
    throw new Error("payment provider unreachable"); // any later step failing
  } catch (e) {
    await db.query("ROLLBACK"); // neither the order nor its timeout was ever there
    console.log(`order ${order} not placed (${e.message}); no timeout`);
  }
} else if (verb === "pay") {
  await db.query("BEGIN");
  const paid = await db.query("UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid'", [order]);
  if (paid.rowCount === 0) {
    await db.query("ROLLBACK");
    console.log(`order ${order} is not unpaid; nothing done`);
  } else {
    const r = await db.query("SELECT dq.cancel('orders', $1) AS was", [job]);
    await db.query("COMMIT"); // paid and cancelled together, or neither
    console.log(`paid order ${order}; ${job} cancelled (it was ${r.rows[0].was ?? "gone"})`);
  }
} else {
  console.error("usage: node order_timeout.mjs place|place-and-fail|pay ORDER [DELAY_SECONDS]");
  process.exitCode = 2;
}
await db.end();
