<?php

declare(strict_types=1);

namespace Dq\Tests\Support;

/**
 * A `dq serve` of the tests: on a free loopback port, embedded store in a
 * fresh temp dir (or the Redis of DQ_TEST_REDIS_URL), killed at the end
 * (also on failure, by a shutdown function).
 */
final class DqServer
{
    /** @var array<int, self> */
    private static array $live = [];
    private static bool $hooked = false;

    /** @var resource|null */
    private $proc = null;
    public int $port;
    public string $url;
    public string $dataDir;
    public string $logFile;

    private function __construct(public readonly string $store)
    {
    }

    public static function bin(): string
    {
        $bin = getenv('DQ_BIN');
        if ($bin === false || $bin === '') {
            $root = dirname(__DIR__, 4);
            $bin = $root . '/target/debug/dq';
            if (!is_executable($bin)) {
                throw new \RuntimeException("DQ_BIN is not set and $bin does not exist: build dq (cargo build -p dq-cli) or set DQ_BIN to the dq binary");
            }
        }
        if (!is_executable($bin)) {
            throw new \RuntimeException("DQ_BIN=$bin is not an executable");
        }
        return $bin;
    }

    public static function redisUrl(): ?string
    {
        $u = getenv('DQ_TEST_REDIS_URL');
        return $u === false || $u === '' ? null : $u;
    }

    /** @return list<string> the stores to test on */
    public static function stores(): array
    {
        return self::redisUrl() === null ? ['embedded'] : ['embedded', 'redis'];
    }

    public static function freePort(): int
    {
        $s = stream_socket_server('tcp://127.0.0.1:0', $errno, $errstr);
        if ($s === false) {
            throw new \RuntimeException("cannot find a free port: $errstr");
        }
        $name = stream_socket_get_name($s, false);
        fclose($s);
        return (int) substr($name, strrpos($name, ':') + 1);
    }

    public static function start(string $store, array $extraArgs = []): self
    {
        $s = new self($store);
        $s->port = self::freePort();
        $tls = in_array('--tls-cert', $extraArgs, true);
        $s->url = ($tls ? 'https' : 'http') . "://127.0.0.1:{$s->port}";
        $s->dataDir = sys_get_temp_dir() . '/dq-php-test-' . bin2hex(random_bytes(6));
        mkdir($s->dataDir, 0700, true);
        $s->logFile = $s->dataDir . '.log';
        $s->extra = $extraArgs;
        $s->launch();
        return $s;
    }

    private array $extra = [];

    private function launch(): void
    {
        $cmd = [self::bin(), 'serve', '--listen', "127.0.0.1:{$this->port}", '--config', '/dev/null',
            '--shutdown-grace', '3s', '--log-level', 'warn'];
        if ($this->store === 'redis') {
            $url = self::redisUrl();
            if ($url === null) {
                throw new \RuntimeException('the redis store needs DQ_TEST_REDIS_URL');
            }
            array_push($cmd, '--redis', $url, '--redis-timeout', '1s');
        } else {
            array_push($cmd, '--data-dir', $this->dataDir);
        }
        array_push($cmd, ...$this->extra);
        $log = fopen($this->logFile, 'a');
        $this->proc = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => $log, 2 => $log], $pipes);
        fclose($log);
        if (!is_resource($this->proc)) {
            throw new \RuntimeException('cannot start ' . implode(' ', $cmd));
        }
        self::$live[spl_object_id($this)] = $this;
        if (!self::$hooked) {
            self::$hooked = true;
            register_shutdown_function(static function (): void {
                foreach (self::$live as $srv) {
                    $srv->stop();
                }
            });
        }
        $this->waitReady(20.0);
    }

    public function running(): bool
    {
        return $this->proc !== null && proc_get_status($this->proc)['running'];
    }

    public function logTail(int $bytes = 4000): string
    {
        $log = (string) @file_get_contents($this->logFile);
        return substr($log, -$bytes);
    }

    public function pid(): int
    {
        return $this->proc ? (int) proc_get_status($this->proc)['pid'] : 0;
    }

    public function waitReady(float $timeout): void
    {
        $deadline = microtime(true) + $timeout;
        $h = curl_init($this->url . '/readyz');
        curl_setopt_array($h, [CURLOPT_RETURNTRANSFER => true, CURLOPT_TIMEOUT_MS => 1000, CURLOPT_CONNECTTIMEOUT_MS => 500,
            CURLOPT_SSL_VERIFYPEER => false, CURLOPT_SSL_VERIFYHOST => 0]);
        while (microtime(true) < $deadline) {
            if (curl_exec($h) !== false && curl_getinfo($h, CURLINFO_RESPONSE_CODE) === 200) {
                return;
            }
            if ($this->proc && !proc_get_status($this->proc)['running']) {
                break;
            }
            usleep(50_000);
        }
        $log = @file_get_contents($this->logFile);
        $this->stop();
        throw new \RuntimeException("dq serve ({$this->store}) did not get ready on {$this->url}; its log:\n$log");
    }

    /** SIGKILL (crash) or SIGTERM, and wait until the process is gone. */
    public function stop(bool $crash = false): void
    {
        if ($this->proc === null) {
            return;
        }
        $pid = $this->pid();
        if (proc_get_status($this->proc)['running']) {
            posix_kill($pid, $crash ? SIGKILL : SIGTERM);
            $deadline = microtime(true) + 8;
            while (proc_get_status($this->proc)['running'] && microtime(true) < $deadline) {
                usleep(20_000);
            }
            if (proc_get_status($this->proc)['running']) {
                posix_kill($pid, SIGKILL);
            }
        }
        proc_close($this->proc);
        $this->proc = null;
        unset(self::$live[spl_object_id($this)]);
    }

    /** Starts it again on the same port and data. */
    public function restart(): void
    {
        $this->stop(true);
        $deadline = microtime(true) + 20;
        while (true) {
            try {
                $this->launch();
                return;
            } catch (\RuntimeException $e) {
                if (microtime(true) > $deadline) {
                    throw $e;
                }
                usleep(200_000);
            }
        }
    }

    public function cleanup(): void
    {
        $this->stop();
        if (getenv('DQ_TEST_KEEP') === '1') {
            fwrite(STDERR, "kept {$this->dataDir} and {$this->logFile}\n");
            return;
        }
        if (is_dir($this->dataDir)) {
            exec('rm -rf ' . escapeshellarg($this->dataDir) . ' ' . escapeshellarg($this->logFile));
        }
    }
}
