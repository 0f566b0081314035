<?php

declare(strict_types=1);

namespace Dq\Tests\Support;

use Dq\Client;
use PHPUnit\Framework\TestCase;

/**
 * A test case with a dq server of one store, shared by the class's tests
 * (each test uses topics of its own).
 */
abstract class ServerTestCase extends TestCase
{
    protected static ?DqServer $server = null;

    abstract protected static function store(): string;

    public static function setUpBeforeClass(): void
    {
        if (static::store() === 'redis' && DqServer::redisUrl() === null) {
            return;
        }
        static::$server = DqServer::start(static::store());
    }

    public static function tearDownAfterClass(): void
    {
        static::$server?->cleanup();
        static::$server = null;
    }

    protected function setUp(): void
    {
        if (static::store() === 'redis' && DqServer::redisUrl() === null) {
            $this->markTestSkipped('DQ_TEST_REDIS_URL is not set');
        }
        if (static::$server !== null && !static::$server->running()) {
            $log = static::$server->logTail();
            static::$server->cleanup();
            static::$server = null;
            $this->fail("dq serve (" . static::store() . ") is no longer running; its log ends with:\n$log");
        }
        if (static::$server === null) {
            // A test that restarted the server and failed may have left none.
            static::$server = DqServer::start(static::store());
        }
    }

    protected function client(array $options = []): Client
    {
        return new Client(static::$server->url, $options);
    }

    protected static function topic(string $name): string
    {
        return 'php-' . $name . '-' . bin2hex(random_bytes(4));
    }

    /** Waits until $cond() is truthy (checked every 50 ms), failing after $timeout s. */
    protected static function waitFor(callable $cond, float $timeout, string $what): mixed
    {
        $deadline = microtime(true) + $timeout;
        while (true) {
            $v = $cond();
            if ($v) {
                return $v;
            }
            if (microtime(true) > $deadline) {
                self::fail("timed out after {$timeout} s waiting for: $what");
            }
            usleep(50_000);
        }
    }

    protected static function nowMs(): int
    {
        return (int) floor(microtime(true) * 1000);
    }
}
