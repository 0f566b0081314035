<?php
// The order-timeout flow on dq's PostgreSQL store, in PHP (PDO, pdo_pgsql):
// the order and its timeout are written in one transaction, and so are the
// payment and the cancel of the timeout.
//   php order_timeout.php place 42 [delay-seconds]   # order + timeout, committed
//   php order_timeout.php place-and-fail 42          # order + timeout, rolled back
//   php order_timeout.php pay 42                     # paid + timeout cancelled
// DATABASE_URL: postgres://app:secret@db:5432/shop (a role granted dq_enqueue).
$url = parse_url(getenv('DATABASE_URL') ?: 'postgres://app@127.0.0.1:5432/shop');
$db = new PDO(
    sprintf('pgsql:host=%s;port=%d;dbname=%s', $url['host'], $url['port'] ?? 5432, ltrim($url['path'], '/')),
    rawurldecode($url['user'] ?? ''),
    rawurldecode($url['pass'] ?? ''),
    [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION],
);
$db->exec("CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL)");

[, $verb, $order] = $argv + [null, null, null];
$delay = (int) ($argv[3] ?? 1800);  // 30 minutes to pay
$job = "close-order-$order";         // one timeout per order: dq.enqueue is idempotent by id

function place(PDO $db, int $order, string $job, int $delay): string
{
    $db->prepare("INSERT INTO orders (id, status) VALUES (?, 'unpaid')")->execute([$order]);
    $q = $db->prepare("SELECT due_at FROM dq.enqueue('orders', ?, ?, make_interval(secs => ?))");
    $q->execute([$job, json_encode(['order' => $order]), $delay]);
    return $q->fetchColumn();
}

switch ($verb) {
    case 'place':
        $db->beginTransaction();
        $due = place($db, (int) $order, $job, $delay);
        $db->commit();  // the order and its timeout exist from here on, together
        echo "placed order $order; $job due at $due\n";
        break;
    case 'place-and-fail':
        $db->beginTransaction();
        try {
            place($db, (int) $order, $job, $delay);
            throw new RuntimeException('payment provider unreachable');  // any later step failing
        } catch (Throwable $e) {
            $db->rollBack();  // neither the order nor its timeout was ever there
            echo "order $order not placed ({$e->getMessage()}); no timeout\n";
        }
        break;
    case 'pay':
        $db->beginTransaction();
        $q = $db->prepare("UPDATE orders SET status = 'paid' WHERE id = ? AND status = 'unpaid'");
        $q->execute([(int) $order]);
        if ($q->rowCount() === 0) {
            $db->rollBack();
            echo "order $order is not unpaid; nothing done\n";
            break;
        }
        $q = $db->prepare("SELECT dq.cancel('orders', ?)");
        $q->execute([$job]);
        $was = $q->fetchColumn();  // the state the timeout was in; NULL when it was gone
        $db->commit();  // paid and cancelled together, or neither
        echo "paid order $order; $job cancelled (it was " . ($was ?? 'gone') . ")\n";
        break;
    default:
        fwrite(STDERR, "usage: php order_timeout.php place|place-and-fail|pay ORDER [DELAY_SECONDS]\n");
        exit(2);
}
