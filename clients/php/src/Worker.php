<?php

declare(strict_types=1);

namespace Dq;

/**
 * Runs handlers for due jobs: a pre-fork pool (`run()`, needs pcntl and
 * posix) or a single process (`work()`, `runOnce()`).
 *
 * ```php
 * $worker = new Dq\Worker($client, ['processes' => 4]);
 * $worker->handle('orders', function (Dq\Job $job) { close_if_unpaid($job->body->order); });
 * $worker->run();   // until SIGTERM / SIGINT
 * ```
 *
 * A handler returns normally: the job is acked. It throws (or returns a
 * Throwable): nacked with the message (an attempt counted; the topic's retry
 * policy decides retry or dead). It throws Dq\Dead: a dead letter at once.
 * It throws Dq\RetryLater($ms): released, due again after $ms, the attempt
 * not counted.
 *
 * Options:
 * - `processes` (4): children of the pool.
 * - `max_jobs` (0: none): a child exits after this many jobs and the master
 *   starts a new one.
 * - `memory_limit_mb` (0: none): a child whose memory (memory_get_usage(true))
 *   is over this after a job exits and is replaced.
 * - `lease_ms` (30000, at least 2000): the lease of a reserved job; extended
 *   every third of it (SIGALRM, whole seconds) while a handler runs.
 * - `grace_ms` (10000): how long a running handler may go on after a stop;
 *   past it the child exits and the job comes back when its lease ends.
 * - `batch` (4): jobs per reserve in each child. Jobs reserved but not yet
 *   started are held (their leases extended too), so keep it small.
 * - `wait_ms` (1000): how long one reserve waits for a due job (long-poll).
 * - `on_child_start`: a callable run in each child as it starts (open your
 *   database connection there, never share one across fork).
 * - `logger`: a callable(string $level, string $message) or an object with
 *   a PSR-3 `log($level, $message)` method; default: warnings and errors to STDERR.
 */
class Worker
{
    /** @var array<string, mixed> */
    private array $handlers = [];
    private array $opts;
    private bool $stopping = false;
    private float $stopAt = 0.0;
    /** @var array<int, float> master: child pid => start time */
    private array $children = [];
    /** @var list<Job> reserved, not started */
    private array $held = [];
    private ?Job $running = null;
    private bool $alarmArmed = false;
    private bool $inAlarm = false;
    private array $acks = [];
    private array $nacks = [];
    private ?Client $keeper = null;
    private int $jobs = 0;
    private int $ppid = 0;
    private array $stats = ['acked' => 0, 'failed' => 0, 'dead' => 0, 'retried' => 0, 'released' => 0];

    public function __construct(private Client $client, array $options = [])
    {
        $defaults = [
            'processes' => 4,
            'max_jobs' => 0,
            'memory_limit_mb' => 0,
            'lease_ms' => 30000,
            'grace_ms' => 10000,
            'batch' => 4,
            'wait_ms' => 1000,
            'on_child_start' => null,
            'logger' => null,
        ];
        foreach (array_keys($options) as $k) {
            if (!array_key_exists($k, $defaults)) {
                throw new \InvalidArgumentException("unknown Dq\\Worker option '$k'");
            }
        }
        $this->opts = $options + $defaults;
        if ((int) $this->opts['lease_ms'] < 2000) {
            throw new \InvalidArgumentException('Dq\\Worker: lease_ms must be at least 2000 (leases are extended every third of it, in whole seconds)');
        }
        $this->opts['batch'] = max(1, min(1000, (int) $this->opts['batch']));
        $this->opts['processes'] = max(1, (int) $this->opts['processes']);
        $this->opts['wait_ms'] = max(0, min(30000, (int) $this->opts['wait_ms']));
    }

    /**
     * Runs `$handler` for the jobs of `$topic`: a callable taking a Dq\Job, a
     * class name (made with `new $class()` once per process; its `handle(Job)`
     * is called) or an object with a `handle(Job)` method.
     */
    public function handle(string $topic, callable|string|object $handler): static
    {
        if (is_string($handler) && !is_callable($handler) && !class_exists($handler)) {
            throw new \InvalidArgumentException("Dq\\Worker: handler '$handler' is neither callable nor a class");
        }
        if (is_object($handler) && !is_callable($handler) && !method_exists($handler, 'handle')) {
            throw new \InvalidArgumentException('Dq\\Worker: a handler object needs a handle(Job $job) method');
        }
        $this->handlers[$topic] = $handler;
        return $this;
    }

    /** Asks the worker to stop (from a handler, or a signal handler of yours). */
    public function stop(): void
    {
        if (!$this->stopping) {
            $this->stopping = true;
            $this->stopAt = microtime(true);
        }
    }

    /** Counts of this process: acked, failed, dead, retried (RetryLater), released (handed back unstarted). */
    public function stats(): array
    {
        return $this->stats;
    }

    // ------------------------------------------------------------ the pool

    /**
     * The pre-fork pool: starts `processes` children, replaces one that
     * exits or dies, and on SIGTERM / SIGINT passes the signal on, waits for
     * every child to finish its job and stop, and returns.
     */
    public function run(): void
    {
        if (!function_exists('pcntl_fork') || !function_exists('posix_kill')) {
            throw new \RuntimeException('Dq\\Worker::run() needs the pcntl and posix extensions; use work() for one process');
        }
        $this->checkHandlers();
        $this->stopping = false;
        // Children must not inherit a connection.
        $this->client->close();
        $prevAsync = pcntl_async_signals(true);
        $prev = self::saveHandlers([SIGTERM, SIGINT]);
        $onStop = function (int $sig): void {
            $this->stop();
            foreach (array_keys($this->children) as $pid) {
                posix_kill($pid, SIGTERM);
            }
        };
        pcntl_signal(SIGTERM, $onStop);
        pcntl_signal(SIGINT, $onStop);
        $crashes = 0;
        $nextSpawn = 0.0;
        $killed = false;
        try {
            while (true) {
                $now = microtime(true);
                while (!$this->stopping && count($this->children) < $this->opts['processes'] && $now >= $nextSpawn) {
                    $this->spawn();
                }
                foreach ($this->children as $pid => $started) {
                    // Only our own children: the program may have others.
                    if (pcntl_waitpid($pid, $status, WNOHANG) !== $pid) {
                        continue;
                    }
                    unset($this->children[$pid]);
                    $planned = pcntl_wifexited($status) && pcntl_wexitstatus($status) === 0;
                    if ($this->stopping) {
                        continue;
                    }
                    if ($planned) {
                        $this->log('info', "worker child $pid exited (job or memory limit); starting another");
                        continue;
                    }
                    $how = pcntl_wifsignaled($status) ? 'killed by signal ' . pcntl_wtermsig($status)
                        : 'exited with status ' . pcntl_wexitstatus($status);
                    $crashes = ($now - $started) < 10.0 ? $crashes + 1 : 1;
                    $delay = $crashes <= 1 ? 0.0 : min(5.0, 0.1 * (2 ** ($crashes - 2)));
                    $nextSpawn = max($nextSpawn, $now + $delay);
                    $this->log('warning', sprintf('worker child %d %s; starting another%s', $pid, $how, $delay > 0 ? sprintf(' in %.1f s', $delay) : ''));
                }
                if ($this->stopping && $this->children === []) {
                    break;
                }
                if ($this->stopping && !$killed && $now > $this->stopAt + $this->opts['grace_ms'] / 1000 + 5) {
                    // A child stuck where PHP runs no signal handler (a
                    // blocking call): its jobs come back when their leases end.
                    $killed = true;
                    foreach (array_keys($this->children) as $pid) {
                        $this->log('error', "worker child $pid did not stop within grace_ms + 5 s; killing it");
                        posix_kill($pid, SIGKILL);
                    }
                }
                usleep(100_000);
            }
        } finally {
            self::restoreHandlers($prev);
            pcntl_async_signals($prevAsync);
        }
    }

    private static function saveHandlers(array $signals): array
    {
        $out = [];
        foreach ($signals as $sig) {
            $out[$sig] = pcntl_signal_get_handler($sig);
        }
        return $out;
    }

    private static function restoreHandlers(array $saved): void
    {
        foreach ($saved as $sig => $h) {
            pcntl_signal($sig, $h === null || $h === 0 ? SIG_DFL : $h);
        }
    }

    /** @return list<int> the pids of the pool's children (in the master) */
    public function children(): array
    {
        return array_keys($this->children);
    }

    private function spawn(): void
    {
        $pid = pcntl_fork();
        if ($pid < 0) {
            $this->log('error', 'fork failed');
            return;
        }
        if ($pid > 0) {
            $this->children[$pid] = microtime(true);
            return;
        }
        // The child.
        $this->children = [];
        $this->poolChild = true;
        $code = 0;
        try {
            $code = $this->child();
        } catch (\Throwable $e) {
            $this->log('error', 'worker child failed: ' . $e::class . ': ' . $e->getMessage());
            $code = 70;
        }
        exit($code);
    }

    // ------------------------------------------------------ one process

    /**
     * Works in this process (no fork) until stop(), SIGTERM / SIGINT (with
     * pcntl), or the `max_jobs` / `memory_limit_mb` limit. Returns the
     * number of jobs handled.
     */
    public function work(): int
    {
        $this->checkHandlers();
        $this->stopping = false;
        $before = $this->jobs;
        $this->child();
        return $this->jobs - $before;
    }

    /**
     * One round: reserves up to `batch` jobs (waiting up to `$waitMs` for one
     * to become due), runs them, sends the acks and nacks. Returns the number
     * of jobs handled.
     */
    public function runOnce(int $waitMs = 0): int
    {
        $this->checkHandlers();
        $jobs = $this->client->reserve(array_keys($this->handlers), [
            'max' => $this->opts['batch'],
            'lease_ms' => (int) $this->opts['lease_ms'],
            'wait_ms' => $waitMs,
        ]);
        $this->held = $jobs;
        $n = 0;
        $signals = function_exists('pcntl_signal');
        if ($signals) {
            // Leases are extended by SIGALRM while a handler runs long.
            $prevAsync = pcntl_async_signals(true);
            $prev = self::saveHandlers([SIGALRM]);
            pcntl_signal(SIGALRM, fn () => $this->onAlarm());
            $this->alarmInstalled = true;
            $this->keeper ??= clone $this->client;
        }
        try {
            while ($this->held !== []) {
                $this->runJob(array_shift($this->held));
                $n++;
            }
        } finally {
            if ($signals) {
                $this->alarmInstalled = false;
                pcntl_alarm(0);
                self::restoreHandlers($prev);
                pcntl_async_signals($prevAsync);
            }
            $this->handBack();
            $this->flush($this->client);
        }
        return $n;
    }

    /** The loop of one process (a child of the pool, or work()). */
    private function child(): int
    {
        $this->ppid = function_exists('posix_getppid') ? posix_getppid() : 0;
        $signals = function_exists('pcntl_signal');
        $prevAsync = false;
        $prev = [];
        if ($signals) {
            $prevAsync = pcntl_async_signals(true);
            $prev = self::saveHandlers([SIGTERM, SIGINT, SIGALRM]);
            $onStop = function (int $sig): void {
                $this->stop();
                if ($this->running !== null && $this->alarmArmed) {
                    pcntl_alarm($this->alarmSeconds());
                }
            };
            pcntl_signal(SIGTERM, $onStop);
            pcntl_signal(SIGINT, $onStop);
            pcntl_signal(SIGALRM, fn () => $this->onAlarm());
            $this->alarmInstalled = true;
        }
        $this->keeper = clone $this->client;
        $topics = array_keys($this->handlers);
        $failures = 0;
        $planned = false;
        try {
            if (is_callable($this->opts['on_child_start'])) {
                ($this->opts['on_child_start'])();
            }
            while (!$this->stopping) {
                if ($this->limitReached()) {
                    $planned = true;
                    break;
                }
                if ($this->poolChild && posix_getppid() !== $this->ppid) {
                    $this->log('warning', 'the pool master is gone; stopping');
                    break;
                }
                $this->flush($this->client);
                try {
                    $jobs = $this->client->reserveWith($topics, [
                        'max' => $this->opts['batch'],
                        'lease_ms' => (int) $this->opts['lease_ms'],
                        'wait_ms' => $this->opts['wait_ms'],
                    ], 0);
                    if ($failures > 0) {
                        $this->log('info', "reserve works again after $failures failures");
                    }
                    $failures = 0;
                } catch (TransportException|DqException $e) {
                    $failures++;
                    if ($failures === 1 || $failures % 30 === 0) {
                        $this->log('warning', "reserve failed ($failures): " . $e->getMessage() . '; retrying');
                    }
                    $this->pause(min(2.0, 0.1 * $failures));
                    continue;
                }
                $this->held = $jobs;
                while ($this->held !== [] && !$this->stopping && !$this->limitReached()) {
                    $this->runJob(array_shift($this->held));
                }
                $this->handBack();
            }
        } finally {
            $this->handBack();
            $this->flush($this->client);
            if ($signals) {
                $this->alarmInstalled = false;
                pcntl_alarm(0);
                self::restoreHandlers($prev);
                pcntl_async_signals($prevAsync);
            }
        }
        return 0;
    }

    private bool $poolChild = false;
    private bool $alarmInstalled = false;

    private function limitReached(): bool
    {
        $max = (int) $this->opts['max_jobs'];
        if ($max > 0 && $this->jobs >= $max) {
            return true;
        }
        $mem = (int) $this->opts['memory_limit_mb'];
        return $mem > 0 && memory_get_usage(true) > $mem * 1048576;
    }

    /** Sleeps up to $s seconds, ending early on stop. */
    private function pause(float $s): void
    {
        $until = microtime(true) + $s;
        while (!$this->stopping && ($left = $until - microtime(true)) > 0) {
            usleep((int) (min($left, 0.1) * 1e6));
        }
    }

    /** Gives back the jobs reserved and not started (the attempt not counted). */
    private function handBack(): void
    {
        while ($this->held !== []) {
            $job = array_shift($this->held);
            try {
                $this->client->release($job->topic, $job->id, (string) $job->token);
                $this->stats['released']++;
            } catch (\Throwable $e) {
                $this->log('warning', "cannot hand back job {$job->topic}/{$job->id}; it comes back when its lease ends: " . $e->getMessage());
            }
        }
    }

    private function alarmSeconds(): int
    {
        $s = max(1, intdiv((int) $this->opts['lease_ms'], 3000));
        if ($this->stopping) {
            $left = $this->stopAt + $this->opts['grace_ms'] / 1000 - microtime(true);
            $s = max(1, min($s, (int) ceil($left)));
        }
        return $s;
    }

    private function runJob(Job $job): void
    {
        $handler = $this->resolve($job->topic);
        $this->running = $job;
        $alarm = $this->alarmInstalled;
        if ($alarm) {
            $this->alarmArmed = true;
            pcntl_alarm($this->alarmSeconds());
        }
        $outcome = null;
        try {
            $r = $handler($job);
            if ($r instanceof \Throwable) {
                $outcome = $r;
            }
        } catch (\Throwable $e) {
            $outcome = $e;
        } finally {
            if ($alarm) {
                $this->alarmArmed = false;
                pcntl_alarm(0);
            }
            $this->running = null;
        }
        $this->jobs++;
        $item = ['topic' => $job->topic, 'id' => $job->id, 'token' => (string) $job->token];
        if ($outcome === null) {
            $this->acks[] = $item;
            $this->stats['acked']++;
        } elseif ($outcome instanceof RetryLater) {
            $this->stats['retried']++;
            try {
                $this->client->release($job->topic, $job->id, (string) $job->token, ['delay_ms' => max(0, $outcome->delayMs)]);
            } catch (\Throwable $e) {
                $this->log('warning', "cannot release job {$job->topic}/{$job->id}; it comes back when its lease ends: " . $e->getMessage());
            }
        } else {
            $dead = $outcome instanceof Dead;
            $this->stats[$dead ? 'dead' : 'failed']++;
            $msg = $outcome->getMessage();
            if ($msg === '') {
                $msg = $outcome::class;
            }
            $item['error'] = strlen($msg) > 4000 ? mb_strcut($msg, 0, 4000) : $msg;
            if ($dead) {
                $item['dead'] = true;
            }
            $this->nacks[] = $item;
            $this->log($dead ? 'error' : 'warning', "job {$job->topic}/{$job->id} (attempt {$job->attempt}) " . ($dead ? 'dead' : 'failed') . ": $msg");
        }
    }

    /** SIGALRM while a handler runs: extend the leases held, send the acks waiting, enforce the grace. */
    private function onAlarm(): void
    {
        if ($this->running === null || !$this->alarmArmed || $this->inAlarm) {
            return;
        }
        $this->inAlarm = true;
        try {
            $keeper = $this->keeper ?? $this->client;
            if ($this->stopping && microtime(true) > $this->stopAt + $this->opts['grace_ms'] / 1000) {
                $this->log('warning', "handler of job {$this->running->topic}/{$this->running->id} still running after the grace period; exiting, the job comes back when its lease ends");
                $this->flush($keeper);
                $held = $this->held;
                $this->held = [];
                foreach ($held as $job) {
                    try {
                        $keeper->release($job->topic, $job->id, (string) $job->token);
                    } catch (\Throwable) {
                    }
                }
                exit(3);
            }
            $touches = [];
            foreach (array_merge([$this->running], $this->held) as $job) {
                $touches[] = ['topic' => $job->topic, 'id' => $job->id, 'token' => (string) $job->token, 'lease_ms' => (int) $this->opts['lease_ms']];
            }
            try {
                $results = $keeper->request(
                    'POST',
                    '/v1/touch:batch',
                    Json::encodeRequest(['touches' => $touches]),
                    true,
                    $text,
                    0,
                    max(1000, intdiv((int) $this->opts['lease_ms'], 3)),
                )['results'] ?? [];
                foreach ($results as $i => $r) {
                    if (isset($r['error'])) {
                        $this->log('warning', "cannot extend the lease of job {$touches[$i]['topic']}/{$touches[$i]['id']}: " . ($r['error']['message'] ?? ''));
                    }
                }
            } catch (\Throwable $e) {
                $this->log('warning', 'cannot extend the leases of held jobs: ' . $e->getMessage());
            }
            $this->flush($keeper);
        } finally {
            $this->inAlarm = false;
        }
        if ($this->alarmArmed && $this->running !== null) {
            pcntl_alarm($this->alarmSeconds());
        }
    }

    /** Sends the acks and nacks waiting, in batches. */
    private function flush(Client $via): void
    {
        foreach (['acks' => 'ack', 'nacks' => 'nack'] as $list => $verb) {
            while ($this->$list !== []) {
                $chunk = array_splice($this->$list, 0, 1000);
                try {
                    $results = $verb === 'ack' ? $via->ackBatch($chunk) : $via->nackBatch($chunk);
                    foreach ($results as $i => $r) {
                        if (isset($r['error'])) {
                            $this->log('warning', "$verb of job {$chunk[$i]['topic']}/{$chunk[$i]['id']} refused (lease lost or job cancelled): " . ($r['error']['message'] ?? ''));
                        }
                    }
                } catch (\Throwable $e) {
                    $this->log('error', sprintf('%d %ss failed; those jobs come back when their leases end: %s', count($chunk), $verb, $e->getMessage()));
                }
            }
        }
    }

    private function checkHandlers(): void
    {
        if ($this->handlers === []) {
            throw new \LogicException('Dq\\Worker has no handler: call handle($topic, $handler) first');
        }
    }

    private function resolve(string $topic): callable
    {
        $h = $this->handlers[$topic] ?? null;
        if ($h === null) {
            return static function (Job $job): void {
                throw new Dead("no handler for topic \"{$job->topic}\"");
            };
        }
        if (is_string($h) && !is_callable($h)) {
            $h = new $h();
        }
        if (is_object($h) && !is_callable($h)) {
            $h = [$h, 'handle'];
        }
        $this->handlers[$topic] = $h;
        return $h;
    }

    private function log(string $level, string $message): void
    {
        $l = $this->opts['logger'];
        if (is_callable($l)) {
            $l($level, $message);
        } elseif (is_object($l) && method_exists($l, 'log')) {
            $l->log($level, $message);
        } elseif ($level === 'warning' || $level === 'error') {
            fwrite(STDERR, sprintf("%s dq worker[%d] %s: %s\n", date('c'), getmypid(), $level, $message));
        }
    }
}
