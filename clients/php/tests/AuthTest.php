<?php

declare(strict_types=1);

namespace Dq\Tests;

use Dq\Client;
use Dq\DqException;
use Dq\Tests\Support\DqServer;
use PHPUnit\Framework\TestCase;

/**
 * API keys: a key is sent as a bearer token. On a server of its own, on the
 * embedded store only: keys live in the store, and a key in a Redis shared
 * with other suites would turn authentication on for them.
 */
final class AuthTest extends TestCase
{
    public function testApiKeys(): void
    {
        $srv = DqServer::start('embedded');
        try {
            $admin = new Client($srv->url);
            $k = $admin->createKey('php-admin', ['admin']);
            $this->assertStringStartsWith('dqk_', $k['secret']);
            $anon = new Client($srv->url, ['retry_for_ms' => 0]);
            try {
                $anon->enqueue('t', 1);
                $this->fail('expected 401');
            } catch (DqException $e) {
                $this->assertSame(401, $e->status);
                $this->assertSame('unauthorized', $e->errorCode);
            }
            $root = new Client($srv->url, ['api_key' => $k['secret']]);
            $w = $root->createKey('php-worker', ['consume:orders', 'read:orders']);
            $this->assertSame(['php-admin', 'php-worker'], array_column($root->listKeys(), 'name'));
            $root->enqueue('orders', ['order' => 1], ['id' => 'o1']);
            $worker = new Client($srv->url, ['api_key' => $w['secret']]);
            $this->assertSame('o1', $worker->get('orders', 'o1')->id);
            try {
                $worker->enqueue('orders', 2);
                $this->fail('expected 403');
            } catch (DqException $e) {
                $this->assertSame(403, $e->status);
                $this->assertSame('forbidden', $e->errorCode);
            }
            $jobs = $worker->reserve('orders', ['wait_ms' => 1000]);
            $worker->ack('orders', 'o1', $jobs[0]->token);
            $root->revokeKey('php-worker');
        } finally {
            $srv->cleanup();
        }
    }
}
