<?php
// A dq consumer in plain PHP: reserve (long-poll), work, ack or nack.
$dq = getenv('DQ') ?: 'http://127.0.0.1:7070';
$idle_exit = getenv('EXIT_WHEN_IDLE') === '1';   // for tests: stop when nothing is due

function call($method, $url, $body) {
    $ctx = stream_context_create(['http' => [
        'method' => $method, 'ignore_errors' => true,
        'header' => "Content-Type: application/json\r\n",
        'content' => json_encode($body), 'timeout' => 40]]);
    return json_decode(file_get_contents($url, false, $ctx), true);
}

function close_if_unpaid($order) {                // your work; must be idempotent
    if ($order < 0) throw new Exception("no such order $order");
    echo "closed order $order\n";
}

while (true) {
    $r = call('POST', "$dq/v1/reserve",
        ['topics' => ['orders'], 'max' => 10, 'wait_ms' => $idle_exit ? 1000 : 30000, 'lease_ms' => 60000]);
    if ($idle_exit && empty($r['jobs'])) break;
    foreach ($r['jobs'] ?? [] as $job) {
        $url = "$dq/v1/topics/orders/jobs/" . rawurlencode($job['id']);
        try {
            close_if_unpaid($job['body']['order']);
            call('POST', "$url/ack", ['token' => $job['token']]);
        } catch (Throwable $e) {
            call('POST', "$url/nack", ['token' => $job['token'], 'error' => $e->getMessage()]);
        }
    }
}
