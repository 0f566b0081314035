<?php

declare(strict_types=1);

namespace Dq\Tests\Support;

/** The pool fixture (tests/fixtures/pool.php) run as a process of its own session. */
final class Pool
{
    /** @var resource */
    private $proc;
    public string $log;
    public string $errLog;
    private static array $live = [];

    public function __construct(string $url, string $topic, array $env = [])
    {
        $this->log = tempnam(sys_get_temp_dir(), 'dq-php-pool-');
        $this->errLog = $this->log . '.err';
        $vars = getenv() + [];
        $vars['DQ_URL'] = $url;
        $vars['DQ_TOPIC'] = $topic;
        $vars['DQ_LOG'] = $this->log;
        foreach ($env as $k => $v) {
            $vars[$k] = (string) $v;
        }
        $err = fopen($this->errLog, 'a');
        $this->proc = proc_open(
            ['setsid', PHP_BINARY, __DIR__ . '/../fixtures/pool.php'],
            [0 => ['file', '/dev/null', 'r'], 1 => $err, 2 => $err],
            $pipes,
            null,
            $vars,
        );
        fclose($err);
        self::$live[spl_object_id($this)] = $this;
        static $hooked = false;
        if (!$hooked) {
            $hooked = true;
            register_shutdown_function(static function (): void {
                foreach (self::$live as $p) {
                    $p->kill();
                }
            });
        }
    }

    public function pid(): int
    {
        return (int) proc_get_status($this->proc)['pid'];
    }

    public function running(): bool
    {
        return is_resource($this->proc) && proc_get_status($this->proc)['running'];
    }

    public function signal(int $sig): void
    {
        posix_kill($this->pid(), $sig);
    }

    /** Waits for the master to exit; returns whether it did within $timeout s. */
    public function wait(float $timeout): bool
    {
        $deadline = microtime(true) + $timeout;
        while ($this->running() && microtime(true) < $deadline) {
            usleep(50_000);
        }
        return !$this->running();
    }

    /** @return list<list<string>> the log's lines, split on spaces */
    public function lines(?string $kind = null): array
    {
        $out = [];
        foreach (file($this->log, FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES) ?: [] as $l) {
            $f = explode(' ', $l);
            if ($kind === null || $f[0] === $kind) {
                $out[] = $f;
            }
        }
        return $out;
    }

    /** @return list<int> pids of the children that started */
    public function childPids(): array
    {
        return array_map(fn ($f) => (int) $f[1], $this->lines('child'));
    }

    public function stderr(): string
    {
        return (string) @file_get_contents($this->errLog);
    }

    /** Kills the master and every child (the whole session), and cleans up. */
    public function kill(): void
    {
        if (is_resource($this->proc)) {
            $pid = $this->pid();
            if ($this->running()) {
                posix_kill(-$pid, SIGKILL);
            }
            foreach ($this->childPids() as $c) {
                @posix_kill($c, SIGKILL);
            }
            proc_close($this->proc);
        }
        unset(self::$live[spl_object_id($this)]);
    }

    public function cleanup(): void
    {
        $this->kill();
        @unlink($this->log);
        @unlink($this->errLog);
    }
}
