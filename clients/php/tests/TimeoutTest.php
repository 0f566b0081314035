<?php

declare(strict_types=1);

namespace Dq\Tests;

use Dq\Client;
use Dq\TransportException;
use PHPUnit\Framework\TestCase;

/** A server that takes the connection and never answers costs a call its `timeout`, then a TransportException. */
final class TimeoutTest extends TestCase
{
    public function testACallThatGetsNoAnswerEndsAtItsTimeout(): void
    {
        // Listening, never accepting: the kernel completes the connection,
        // nobody reads the request or answers it.
        $server = stream_socket_server('tcp://127.0.0.1:0', $errno, $errstr);
        $this->assertNotFalse($server, $errstr);
        $port = (int) substr(strrchr(stream_socket_get_name($server, false), ':'), 1);
        try {
            $c = new Client("http://127.0.0.1:$port", ['timeout' => 0.5, 'retry_for_ms' => 0]);
            $start = microtime(true);
            try {
                $c->get('t', 'job');
                $this->fail('a server that never answers cannot answer');
            } catch (TransportException $e) {
                $took = microtime(true) - $start;
                $this->assertSame(CURLE_OPERATION_TIMEDOUT, $e->curlErrno, $e->getMessage());
                $this->assertFalse($e->connectFailed, 'the connection was made');
                $this->assertGreaterThanOrEqual(0.45, $took);
                $this->assertLessThan(3.0, $took, 'the timeout bounds the call');
            }
        } finally {
            fclose($server);
        }
    }
}
