"""The order-timeout flow on dq's PostgreSQL store, in Python (psycopg 3):
the order and its timeout are written in one transaction, and so are the
payment and the cancel of the timeout.
  python order_timeout.py place 42 [delay-seconds]   # order + timeout, committed
  python order_timeout.py place-and-fail 42          # order + timeout, rolled back
  python order_timeout.py pay 42                     # paid + timeout cancelled
DATABASE_URL: postgres://app:secret@db:5432/shop (a role granted dq_enqueue)."""
import os
import sys
from datetime import timedelta

import psycopg
from psycopg.types.json import Jsonb

db = psycopg.connect(os.environ.get("DATABASE_URL", "postgres://app@127.0.0.1:5432/shop"), autocommit=True)
with db.transaction():
    db.execute("CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL)")

verb, order = sys.argv[1], int(sys.argv[2])
delay = timedelta(seconds=int(sys.argv[3]) if len(sys.argv) > 3 else 1800)  # 30 minutes to pay
job = f"close-order-{order}"  # one timeout per order: dq.enqueue is idempotent by id


def place():
    db.execute("INSERT INTO orders (id, status) VALUES (%s, 'unpaid')", (order,))
    return db.execute("SELECT due_at FROM dq.enqueue('orders', %s, %s, %s)",
                      (job, Jsonb({"order": order}), delay)).fetchone()[0]


class PaymentFailed(Exception):
    pass


if verb == "place":
    with db.transaction():  # commits when the block ends: the order and its timeout, together
        due = place()
    print(f"placed order {order}; {job} due at {due}")
elif verb == "place-and-fail":
    try:
        with db.transaction():  # an exception in the block rolls it back
            place()
            raise PaymentFailed("payment provider unreachable")  # any later step failing
    except PaymentFailed as e:
        print(f"order {order} not placed ({e}); no timeout")
elif verb == "pay":
    with db.transaction():  # paid and cancelled together, or neither
        paid = db.execute("UPDATE orders SET status = 'paid' WHERE id = %s AND status = 'unpaid'",
                          (order,)).rowcount
        if paid:  # the state the timeout was in; None when it was gone
            was = db.execute("SELECT dq.cancel('orders', %s)", (job,)).fetchone()[0]
    print(f"paid order {order}; {job} cancelled (it was {was or 'gone'})" if paid
          else f"order {order} is not unpaid; nothing done")
else:
    sys.exit("usage: python order_timeout.py place|place-and-fail|pay ORDER [DELAY_SECONDS]")
