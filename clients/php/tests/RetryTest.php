<?php

declare(strict_types=1);

namespace Dq\Tests;

use Dq\Client;
use Dq\DqException;
use Dq\Tests\Support\DqServer;
use PHPUnit\Framework\TestCase;

/** A 503 with Retry-After is retried within the client's bound, then raised (a drained server of its own). */
final class RetryTest extends TestCase
{
    public function testServiceUnavailableIsRetriedWithinTheBoundThenRaised(): void
    {
        $srv = DqServer::start('embedded');
        try {
            $admin = new Client($srv->url);
            $admin->request('POST', '/v1/admin/drain', '{}', false);
            foreach ([0 => [0.0, 0.5], 2500 => [1.8, 4.5]] as $budget => [$min, $max]) {
                $c = new Client($srv->url, ['retry_for_ms' => $budget]);
                $start = microtime(true);
                try {
                    $c->reserve('t');
                    $this->fail('a drained instance refuses reserves');
                } catch (DqException $e) {
                    $took = microtime(true) - $start;
                    $this->assertSame(503, $e->status);
                    $this->assertSame('draining', $e->errorCode);
                    $this->assertSame(1000, $e->retryAfterMs);
                    $this->assertTrue($e->isTransient());
                    $this->assertGreaterThanOrEqual($min, $took, "budget $budget");
                    $this->assertLessThan($max, $took, "budget $budget");
                }
            }
            // Other calls go on while draining.
            $this->assertTrue($admin->enqueue('t', 1, ['id' => 'x'])['created']);
        } finally {
            $srv->cleanup();
        }
    }
}
