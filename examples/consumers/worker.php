<?php
// A dq consumer in plain PHP: reserve (long-poll), work, ack or nack.
// Waits and retries while dq is unreachable or busy; stops on a refused key.
$dq = getenv('DQ') ?: 'http://127.0.0.1:7070';
$key = getenv('DQ_TOKEN');                        // an API key, when dq requires one
$idle_exit = getenv('EXIT_WHEN_IDLE') === '1';   // for tests: stop when nothing is due

// [status, body, Retry-After seconds]; status 0 when dq was not reached.
function call($method, $url, $body) {
    global $key;
    $ctx = stream_context_create(['http' => [
        'method' => $method, 'ignore_errors' => true, 'timeout' => 40,
        'header' => "Content-Type: application/json\r\n" . ($key ? "Authorization: Bearer $key\r\n" : ''),
        'content' => json_encode($body)]]);
    $text = @file_get_contents($url, false, $ctx);
    if ($text === false) return [0, null, null];
    $status = (int) explode(' ', $http_response_header[0])[1];
    $retry = null;
    foreach ($http_response_header as $h)
        if (stripos($h, 'retry-after:') === 0) $retry = (int) trim(substr($h, 12));
    return [$status, json_decode($text, true), $retry];
}

function close_if_unpaid($order) {                // your work; must be idempotent
    if ($order < 0) throw new Exception("no such order $order");
    echo "closed order $order\n";
}

$backoff = 1;
while (true) {
    [$status, $r, $retry] = call('POST', "$dq/v1/reserve",
        ['topics' => ['orders'], 'max' => 10, 'wait_ms' => $idle_exit ? 1000 : 30000, 'lease_ms' => 60000]);
    if ($status >= 400 && $status < 500 && $status !== 429) {   // a refused key or a bad request: retrying won't help
        fwrite(STDERR, "dq refused the reserve ($status): " . json_encode($r['error'] ?? null) . "\n");
        exit(1);
    }
    if ($status !== 200) {                                       // dq down, restarting or busy: wait, try again
        $wait = $retry ?? $backoff;
        fwrite(STDERR, "reserve failed (" . ($status ?: 'dq unreachable') . "), retrying in {$wait} s\n");
        sleep($wait);
        $backoff = min($backoff * 2, 30);
        continue;
    }
    $backoff = 1;
    if ($idle_exit && empty($r['jobs'])) break;
    foreach ($r['jobs'] as $job) {       // an ack or nack that fails is fine: the job comes back after its lease
        $url = "$dq/v1/topics/orders/jobs/" . rawurlencode($job['id']);
        try {
            close_if_unpaid($job['body']['order']);
            call('POST', "$url/ack", ['token' => $job['token']]);
        } catch (Throwable $e) {
            call('POST', "$url/nack", ['token' => $job['token'], 'error' => $e->getMessage()]);
        }
    }
}
