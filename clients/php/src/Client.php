<?php

declare(strict_types=1);

namespace Dq;

/**
 * A client of one dq server.
 *
 * ```php
 * $client = new Dq\Client('http://127.0.0.1:7070', ['api_key' => 'dqk_...']);
 * $client->enqueue('orders', ['order' => 42], ['id' => 'order-42', 'delay_ms' => 1_800_000]);
 * ```
 *
 * Options:
 * - `api_key`: sent as `Authorization: Bearer <key>` (an API key or the admin token).
 * - `timeout` (s, default 60), `connect_timeout` (s, default 5). A reserve
 *   waits its `wait_ms` beyond `timeout` when that is longer.
 * - `retry_for_ms` (default 30000): how long a 503 with Retry-After, or a
 *   connection error on a call that is safe to repeat, is retried before it
 *   is raised; 0 never retries.
 * - `tls`: `['ca_file' => path, 'verify' => true, 'cert_file' => path, 'key_file' => path]`.
 * - `user_agent`.
 *
 * One keep-alive connection per Client (one curl handle). A process forked
 * from one that used the client makes its own connection on its first call.
 *
 * Errors: Dq\DqException (dq answered with an error: `status`, `errorCode`,
 * message, `retryAfterMs`), Dq\TransportException (no answer).
 */
class Client
{
    private string $base;
    private ?string $apiKey;
    private float $timeout;
    private float $connectTimeout;
    private int $retryForMs;
    /** @var array<string, mixed> */
    private array $tls;
    private string $userAgent;
    private ?\CurlHandle $curl = null;
    private int $curlPid = 0;
    /** @var array<string, string> */
    private array $replyHeaders = [];
    /** Handles inherited over fork(): kept, never closed here (the parent owns the connection). */
    private static array $inherited = [];

    /** @param array<string, mixed> $options */
    public function __construct(string $url, array $options = [])
    {
        if (!extension_loaded('curl')) {
            throw new \RuntimeException('Dq\\Client needs the curl extension (apt-get install php-curl)');
        }
        $known = ['api_key', 'timeout', 'connect_timeout', 'retry_for_ms', 'tls', 'user_agent'];
        foreach (array_keys($options) as $k) {
            if (!in_array($k, $known, true)) {
                throw new \InvalidArgumentException("unknown Dq\\Client option '$k'");
            }
        }
        $this->base = rtrim($url, '/');
        $this->apiKey = $options['api_key'] ?? null;
        $this->timeout = (float) ($options['timeout'] ?? 60);
        $this->connectTimeout = (float) ($options['connect_timeout'] ?? 5);
        $this->retryForMs = (int) ($options['retry_for_ms'] ?? 30000);
        $this->tls = $options['tls'] ?? [];
        $this->userAgent = $options['user_agent'] ?? 'dq-php/0.1';
    }

    public function __clone()
    {
        // A clone makes its own connection.
        $this->curl = null;
        $this->curlPid = 0;
    }

    public function url(): string
    {
        return $this->base;
    }

    /** Closes the connection (the next call opens a new one). */
    public function close(): void
    {
        if ($this->curl !== null && $this->curlPid === getmypid()) {
            curl_close($this->curl);
        }
        $this->curl = null;
        $this->curlPid = 0;
    }

    /** Percent-encodes one path segment (a topic, a job id, a name). */
    public static function segment(string $s): string
    {
        return str_replace('%3A', ':', rawurlencode($s));
    }

    // ---------------------------------------------------------------- jobs

    /**
     * Enqueues one job. `$body`: any JSON-encodable value (an empty PHP array
     * is `[]`; `new stdClass` or `(object) []` is `{}`), a Dq\RawJson (JSON
     * text sent as it is) or Dq\Bytes (bytes). Options, as on the wire: `id`,
     * `delay_ms` or `due_at_ms`, `priority`, `max_attempts`, `lease_ms`,
     * `retry`, `replace`, `dedup_ms`, `key`.
     *
     * @return array{id: string, created: bool, replaced?: bool, deduplicated?: bool, due_at_ms?: int, state?: string}
     */
    public function enqueue(string $topic, mixed $body = null, array $options = []): array
    {
        return $this->request(
            'POST',
            '/v1/topics/' . self::segment($topic) . '/jobs',
            Json::withBody($body, $options),
            isset($options['id']),
        );
    }

    /**
     * Enqueues up to 1000 jobs in one atomic step. Each job is an array of
     * the enqueue options plus `body` (a value, Dq\RawJson or Dq\Bytes).
     * Returns a result per job, in order: the enqueue reply, or
     * `['error' => ['code' => ..., 'message' => ...]]` for a job refused.
     *
     * @param list<array<string, mixed>> $jobs
     * @return list<array<string, mixed>>
     */
    public function enqueueBatch(string $topic, array $jobs): array
    {
        $parts = [];
        foreach ($jobs as $job) {
            if (!is_array($job)) {
                throw new \InvalidArgumentException('enqueueBatch: each job is an array of options with a body');
            }
            $body = $job['body'] ?? null;
            unset($job['body']);
            $parts[] = Json::withBody($body, $job);
        }
        $allIds = $jobs !== [] && count(array_filter($jobs, fn ($j) => isset($j['id']))) === count($jobs);
        $r = $this->request(
            'POST',
            '/v1/topics/' . self::segment($topic) . '/jobs:batch',
            '{"jobs":[' . implode(',', $parts) . ']}',
            $allIds,
        );
        return $r['results'] ?? [];
    }

    /** One job, in any state (404 `job_not_found` as a DqException). */
    public function get(string $topic, string $id): Job
    {
        $text = '';
        $data = $this->request('GET', $this->jobPath($topic, $id), null, true, $text);
        return Job::listFrom([$data], $text, $topic)[0];
    }

    /** Cancels a job in any state: `['id', 'cancelled' => true, 'state' => <state it had>]`. */
    public function cancel(string $topic, string $id): array
    {
        return $this->request('DELETE', $this->jobPath($topic, $id), null, true);
    }

    /**
     * Moves a waiting job: `['delay_ms' => n]` or `['due_at_ms' => t]`.
     * Returns `['id', 'due_at_ms']`.
     */
    public function reschedule(string $topic, string $id, array $options): array
    {
        return $this->request('PATCH', $this->jobPath($topic, $id), Json::encodeRequest($options), true);
    }

    /**
     * A page of a topic's jobs (export): options `state`, `limit`, `cursor`.
     *
     * @return array{jobs: list<Job>, cursor: ?string}
     */
    public function listJobs(string $topic, array $options = []): array
    {
        $text = '';
        $r = $this->request('GET', '/v1/topics/' . self::segment($topic) . '/jobs' . self::query($options), null, true, $text);
        return ['jobs' => Job::listFrom($r['jobs'] ?? [], $text, $topic), 'cursor' => $r['cursor'] ?? null];
    }

    // ------------------------------------------------------------ consuming

    /**
     * Leases up to `max` due jobs of the topics. Options: `max` (1-1000,
     * default 1), `lease_ms`, `wait_ms` (long-poll, up to 30000; default 0).
     *
     * @param string|list<string> $topics
     * @return list<Job>
     */
    public function reserve(string|array $topics, array $options = []): array
    {
        return $this->reserveWith($topics, $options, null);
    }

    /** @internal reserve with a retry budget of its own (the worker's). */
    public function reserveWith(string|array $topics, array $options, ?int $retryForMs): array
    {
        $options = ['topics' => array_values((array) $topics)] + $options;
        $text = '';
        $wait = (int) ($options['wait_ms'] ?? 0);
        $r = $this->request('POST', '/v1/reserve', Json::encodeRequest($options), true, $text, $wait, $retryForMs);
        return Job::listFrom($r['jobs'] ?? [], $text);
    }

    /** The job is done (deleted). 409 `lease_mismatch` for a stale token. */
    public function ack(string $topic, string $id, string $token): array
    {
        return $this->request('POST', $this->jobPath($topic, $id) . '/ack', Json::encodeRequest(['token' => $token]), true);
    }

    /**
     * The attempt failed. Options: `error` (kept as last_error),
     * `retry_in_ms`, `dead` (true: a dead letter at once).
     * Returns `['id', 'state' => 'scheduled'|'dead', 'due_at_ms'?]`.
     */
    public function nack(string $topic, string $id, string $token, array $options = []): array
    {
        return $this->request(
            'POST',
            $this->jobPath($topic, $id) . '/nack',
            Json::encodeRequest(['token' => $token] + $options),
            true,
        );
    }

    /** Extends the lease: option `lease_ms`. Returns `['id', 'lease_deadline_ms']`. */
    public function touch(string $topic, string $id, string $token, array $options = []): array
    {
        return $this->request(
            'POST',
            $this->jobPath($topic, $id) . '/touch',
            Json::encodeRequest(['token' => $token] + $options),
            true,
        );
    }

    /** Gives the job back, attempt not counted: option `delay_ms`. Returns `['id', 'state', 'due_at_ms']`. */
    public function release(string $topic, string $id, string $token, array $options = []): array
    {
        return $this->request(
            'POST',
            $this->jobPath($topic, $id) . '/release',
            Json::encodeRequest(['token' => $token] + $options),
            true,
        );
    }

    /**
     * Up to 1000 acks: each `['topic', 'id', 'token']` or a Job. A result per
     * item: `['acked' => true]` or `['error' => [...]]`.
     *
     * @param list<array<string, mixed>|Job> $acks
     */
    public function ackBatch(array $acks): array
    {
        $r = $this->request('POST', '/v1/ack:batch', Json::encodeRequest(['acks' => self::items($acks)]), true);
        return $r['results'] ?? [];
    }

    /**
     * Up to 1000 nacks: each `['topic', 'id', 'token', 'error'?, 'retry_in_ms'?, 'dead'?, 'priority'?]`.
     * A result per item: `['state' => 'scheduled', 'due_at_ms']`, `['state' => 'dead']` or `['error' => [...]]`.
     *
     * @param list<array<string, mixed>|Job> $nacks
     */
    public function nackBatch(array $nacks): array
    {
        $r = $this->request('POST', '/v1/nack:batch', Json::encodeRequest(['nacks' => self::items($nacks)]), true);
        return $r['results'] ?? [];
    }

    /**
     * Up to 1000 lease extensions: each `['topic', 'id', 'token', 'lease_ms'?]`.
     * A result per item: `['lease_deadline_ms']` or `['error' => [...]]`.
     *
     * @param list<array<string, mixed>|Job> $touches
     */
    public function touchBatch(array $touches): array
    {
        $r = $this->request('POST', '/v1/touch:batch', Json::encodeRequest(['touches' => self::items($touches)]), true);
        return $r['results'] ?? [];
    }

    // --------------------------------------------------------------- topics

    /** `['name', 'config', 'stats']`; 404 `topic_not_found`. */
    public function getTopic(string $topic): array
    {
        return $this->request('GET', '/v1/topics/' . self::segment($topic), null, true);
    }

    /**
     * Changes a topic's settings (fields left out keep their value; creates
     * the topic): `max_attempts`, `lease_ms`, `retry`, `dead_cap`,
     * `default_delay_ms`, `dedup_ms`, `paused`, `rate_limit`, `delivery`, ...
     * Returns `['name', 'config']`.
     */
    public function configureTopic(string $topic, array $settings): array
    {
        return $this->request('PUT', '/v1/topics/' . self::segment($topic), Json::encodeRequest($settings), true);
    }

    /** Deletes a topic and its jobs: `['name', 'deleted_jobs']`. */
    public function deleteTopic(string $topic): array
    {
        return $this->request('DELETE', '/v1/topics/' . self::segment($topic), null, true);
    }

    /**
     * One page of topics: options `limit`, `cursor`, `prefix`.
     * Returns `['topics' => [['name', 'stats'], ...], 'next_cursor' => ?string]`.
     */
    public function listTopics(array $options = []): array
    {
        return $this->request('GET', '/v1/topics' . self::query($options), null, true);
    }

    /** Every topic (all pages), optionally those whose name starts with `$prefix`. */
    public function topics(?string $prefix = null): array
    {
        $out = [];
        $cursor = null;
        do {
            $q = ['limit' => 1000];
            if ($prefix !== null) {
                $q['prefix'] = $prefix;
            }
            if ($cursor !== null) {
                $q['cursor'] = $cursor;
            }
            $page = $this->listTopics($q);
            array_push($out, ...($page['topics'] ?? []));
            $cursor = $page['next_cursor'] ?? null;
        } while ($cursor !== null);
        return $out;
    }

    // --------------------------------------------------------- dead letters

    /** @return list<Job> dead letters, oldest death first */
    public function listDead(string $topic, int $offset = 0, int $limit = 100): array
    {
        $text = '';
        $r = $this->request(
            'GET',
            '/v1/topics/' . self::segment($topic) . '/dead' . self::query(['offset' => $offset, 'limit' => $limit]),
            null,
            true,
            $text,
        );
        return Job::listFrom($r['jobs'] ?? [], $text, $topic);
    }

    /** Replays these dead letters (all when `$ids` is null): due now, fresh attempts. Returns how many. */
    public function replayDead(string $topic, ?array $ids = null): int
    {
        $body = $ids === null ? '{}' : Json::encodeRequest(['ids' => array_values($ids)]);
        $r = $this->request('POST', '/v1/topics/' . self::segment($topic) . '/dead/replay', $body, true);
        return (int) ($r['replayed'] ?? 0);
    }

    /** Deletes a topic's dead letters. Returns how many. */
    public function purgeDead(string $topic): int
    {
        $r = $this->request('DELETE', '/v1/topics/' . self::segment($topic) . '/dead', null, true);
        return (int) ($r['purged'] ?? 0);
    }

    // ------------------------------------------------------------ schedules

    /**
     * Creates or replaces a schedule: `['topic' => ..., 'cron' => ... | 'every' => '90s',
     * 'timezone', 'body', 'priority', 'catch_up', 'paused', 'start_at', 'end_at']`.
     * A `body` may be a Dq\RawJson or Dq\Bytes as for enqueue.
     */
    public function putSchedule(string $name, array $spec): array
    {
        if (array_key_exists('body', $spec)) {
            $body = $spec['body'];
            unset($spec['body']);
            $req = Json::withBody($body, $spec);
        } else {
            $req = Json::encodeRequest($spec);
        }
        return $this->request('PUT', '/v1/schedules/' . self::segment($name), $req, true);
    }

    public function getSchedule(string $name): array
    {
        return $this->request('GET', '/v1/schedules/' . self::segment($name), null, true);
    }

    /** @return list<array<string, mixed>> */
    public function listSchedules(): array
    {
        return $this->request('GET', '/v1/schedules', null, true)['schedules'] ?? [];
    }

    public function pauseSchedule(string $name): array
    {
        return $this->request('POST', '/v1/schedules/' . self::segment($name) . '/pause', '{}', true);
    }

    public function resumeSchedule(string $name): array
    {
        return $this->request('POST', '/v1/schedules/' . self::segment($name) . '/resume', '{}', true);
    }

    public function deleteSchedule(string $name): array
    {
        return $this->request('DELETE', '/v1/schedules/' . self::segment($name), null, true);
    }

    // ----------------------------------------------------------- keys, health

    /** Creates an API key: returns `['name', 'scopes', 'created_ms', 'secret', ...]` (the secret shown once). */
    public function createKey(string $name, array $scopes, array $options = []): array
    {
        return $this->request('POST', '/v1/keys', Json::encodeRequest(['name' => $name, 'scopes' => $scopes] + $options), false);
    }

    public function listKeys(): array
    {
        return $this->request('GET', '/v1/keys', null, true)['keys'] ?? [];
    }

    public function revokeKey(string $name): array
    {
        return $this->request('DELETE', '/v1/keys/' . self::segment($name), null, true);
    }

    public function rotateKey(string $name): array
    {
        return $this->request('POST', '/v1/keys/' . self::segment($name) . '/rotate', '{}', false);
    }

    /** GET /readyz: the store answers and the instance is not draining (else a DqException, 503). */
    public function ready(): array
    {
        return $this->request('GET', '/readyz', null, false, $text, 0, 0);
    }

    // ------------------------------------------------------------- plumbing

    private function jobPath(string $topic, string $id): string
    {
        return '/v1/topics/' . self::segment($topic) . '/jobs/' . self::segment($id);
    }

    private static function query(array $q): string
    {
        $q = array_filter($q, fn ($v) => $v !== null);
        return $q === [] ? '' : '?' . http_build_query($q, '', '&', PHP_QUERY_RFC3986);
    }

    /** @param list<array<string, mixed>|Job> $items */
    private static function items(array $items): array
    {
        $out = [];
        foreach ($items as $it) {
            if ($it instanceof Job) {
                $it = ['topic' => $it->topic, 'id' => $it->id, 'token' => (string) $it->token];
            }
            $out[] = $it;
        }
        return $out;
    }

    private function handle(): \CurlHandle
    {
        $pid = getmypid();
        if ($this->curl !== null && $this->curlPid !== $pid) {
            // Inherited over fork: the connection belongs to the parent. Keep
            // the handle referenced so it is never cleaned up (and never
            // writes to the shared socket) here; open our own.
            self::$inherited[] = $this->curl;
            $this->curl = null;
        }
        if ($this->curl === null) {
            $h = curl_init();
            $opts = [
                CURLOPT_RETURNTRANSFER => true,
                CURLOPT_CONNECTTIMEOUT_MS => (int) ($this->connectTimeout * 1000),
                CURLOPT_USERAGENT => $this->userAgent,
                CURLOPT_TCP_NODELAY => true,
                CURLOPT_NOSIGNAL => true,
                CURLOPT_FOLLOWLOCATION => false,
                CURLOPT_HEADERFUNCTION => function ($ch, string $line): int {
                    $p = strpos($line, ':');
                    if ($p !== false) {
                        $this->replyHeaders[strtolower(trim(substr($line, 0, $p)))] = trim(substr($line, $p + 1));
                    }
                    return strlen($line);
                },
            ];
            if (isset($this->tls['ca_file'])) {
                $opts[CURLOPT_CAINFO] = $this->tls['ca_file'];
            }
            if (isset($this->tls['verify']) && !$this->tls['verify']) {
                $opts[CURLOPT_SSL_VERIFYPEER] = false;
                $opts[CURLOPT_SSL_VERIFYHOST] = 0;
            }
            if (isset($this->tls['cert_file'])) {
                $opts[CURLOPT_SSLCERT] = $this->tls['cert_file'];
            }
            if (isset($this->tls['key_file'])) {
                $opts[CURLOPT_SSLKEY] = $this->tls['key_file'];
            }
            curl_setopt_array($h, $opts);
            $this->curl = $h;
            $this->curlPid = $pid;
        }
        return $this->curl;
    }

    /**
     * One HTTP exchange: [status, body text]. Throws TransportException.
     *
     * @return array{int, string}
     */
    private function exchange(string $method, string $path, ?string $body, int $waitMs): array
    {
        $h = $this->handle();
        $headers = ['Expect:', 'Accept: application/json'];
        if ($this->apiKey !== null) {
            $headers[] = 'Authorization: Bearer ' . $this->apiKey;
        }
        $timeoutMs = (int) ($this->timeout * 1000);
        if ($waitMs > 0) {
            $timeoutMs = max($timeoutMs, $waitMs + 10000);
        }
        $opts = [
            CURLOPT_URL => $this->base . $path,
            CURLOPT_TIMEOUT_MS => $timeoutMs,
        ];
        if ($body !== null) {
            $headers[] = 'Content-Type: application/json';
            $opts[CURLOPT_POST] = true;
            $opts[CURLOPT_POSTFIELDS] = $body;
            $opts[CURLOPT_CUSTOMREQUEST] = $method === 'POST' ? null : $method;
        } else {
            $opts[CURLOPT_HTTPGET] = true;
            $opts[CURLOPT_CUSTOMREQUEST] = $method === 'GET' ? null : $method;
        }
        $opts[CURLOPT_HTTPHEADER] = $headers;
        curl_setopt_array($h, $opts);
        $this->replyHeaders = [];
        $text = curl_exec($h);
        if ($text === false) {
            $errno = curl_errno($h);
            $msg = curl_error($h);
            // After a failure the connection state is unknown: start afresh.
            $this->close();
            $connect = in_array($errno, [CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY], true);
            throw new TransportException("cannot reach dq at {$this->base}: $msg (curl error $errno)", $errno, $connect);
        }
        return [(int) curl_getinfo($h, CURLINFO_RESPONSE_CODE), (string) $text];
    }

    /**
     * Sends a request and decodes the reply; retries a 503 with Retry-After
     * and (for calls safe to repeat) connection errors within the retry budget.
     *
     * @internal
     */
    public function request(
        string $method,
        string $path,
        ?string $body,
        bool $idempotent,
        ?string &$text = null,
        int $waitMs = 0,
        ?int $retryForMs = null,
    ): mixed {
        $budgetMs = $retryForMs ?? $this->retryForMs;
        $deadline = microtime(true) + $budgetMs / 1000;
        $attempt = 0;
        while (true) {
            $waitS = null;
            try {
                [$status, $text] = $this->exchange($method, $path, $body, $waitMs);
            } catch (TransportException $e) {
                if (!$idempotent && !$e->connectFailed) {
                    throw $e;
                }
                $waitS = min(2.0, 0.1 * (2 ** min($attempt, 5)));
                if (microtime(true) + $waitS > $deadline) {
                    throw $e;
                }
            }
            if ($waitS === null) {
                if ($status >= 200 && $status < 300) {
                    return $text === '' ? [] : Json::decode($text);
                }
                $err = $this->error($status, $text);
                $retryable = $status === 503 && $err->retryAfterMs !== null
                    && ($idempotent || $err->errorCode !== 'store_outcome_unknown');
                if (!$retryable) {
                    throw $err;
                }
                $waitS = max(0.05, min(5.0, $err->retryAfterMs / 1000));
                if (microtime(true) + $waitS > $deadline) {
                    throw $err;
                }
            }
            usleep((int) ($waitS * 1e6));
            $attempt++;
        }
    }

    private function error(int $status, string $text): DqException
    {
        $v = json_decode($text, true);
        $code = is_array($v) ? (string) ($v['error']['code'] ?? '') : '';
        $msg = is_array($v) ? (string) ($v['error']['message'] ?? '') : '';
        if ($code === '') {
            $code = 'http_' . $status;
            $msg = $msg !== '' ? $msg : trim(substr($text, 0, 200));
        }
        $retryAfter = null;
        if (isset($this->replyHeaders['retry-after']) && is_numeric($this->replyHeaders['retry-after'])) {
            $retryAfter = (int) round((float) $this->replyHeaders['retry-after'] * 1000);
        }
        return new DqException($status, $code, $msg, $retryAfter);
    }
}
