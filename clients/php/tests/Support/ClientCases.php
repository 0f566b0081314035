<?php

declare(strict_types=1);

namespace Dq\Tests\Support;

use Dq\Bytes;
use Dq\Client;
use Dq\DqException;
use Dq\Job;
use Dq\RawJson;
use Dq\TransportException;

/** Every client call and its errors, against a real dq serve. */
abstract class ClientCases extends ServerTestCase
{
    private static function assertDq(callable $f, int $status, string $code): DqException
    {
        try {
            $f();
        } catch (DqException $e) {
            self::assertSame($status, $e->status, "status of {$e->errorCode}: {$e->getMessage()}");
            self::assertSame($code, $e->errorCode, $e->getMessage());
            self::assertNotSame('', $e->getMessage());
            return $e;
        }
        self::fail("expected a DqException $status $code");
    }

    public function testBodiesRoundTripExactly(): void
    {
        $c = $this->client();
        $t = self::topic('bodies');
        $texts = [
            '{"n": 18446744073709551617, "f": 1e400, "z": -0, "o": {}, "l": [], "s": "h\u00e9llo ☃ 😀 \"q\" \\\\"}',
            '{}',
            '[]',
            '"just a string"',
            'null',
            '123456789012345678901234567890',
            '{"deep": [[[{"a": [1, 2, {"b": {}}]}]]], "key order": {"z": 1, "a": 2}}',
        ];
        foreach ($texts as $i => $text) {
            $c->enqueue($t, new RawJson($text), ['id' => "raw-$i"]);
            $job = $c->get($t, "raw-$i");
            $this->assertSame($text, $job->rawBody, "raw body $i");
        }
        // The object/list distinction survives decoding: {} is an object, [] a list.
        $j = $c->get($t, 'raw-0');
        $this->assertInstanceOf(\stdClass::class, $j->body);
        $this->assertInstanceOf(\stdClass::class, $j->body->o);
        $this->assertSame([], $j->body->l);
        $this->assertSame('18446744073709551617', $j->body->n);
        $this->assertSame("h\u{e9}llo ☃ 😀 \"q\" \\", $j->body->s);
        $this->assertInstanceOf(\stdClass::class, $c->get($t, 'raw-1')->body);
        $this->assertSame([], $c->get($t, 'raw-2')->body);
        $this->assertSame(['z' => 1, 'a' => 2], $c->get($t, 'raw-6')->json()['key order']);

        // PHP values: encoded, and decoded back to the same JSON.
        $values = [
            (object) [],
            [],
            ['order' => 42, 'items' => [1, 2.5, true, null], 'meta' => (object) [], 'name' => 'Zoë 😀', 'big' => PHP_INT_MAX],
            'text',
            3.0,
            null,
        ];
        foreach ($values as $i => $v) {
            $c->enqueue($t, $v, ['id' => "val-$i"]);
            $job = $c->get($t, "val-$i");
            $this->assertSame(json_encode($v, \Dq\Json::ENCODE), $job->rawBody, "value $i");
            // Objects come back as stdClass, lists as arrays.
            $this->assertEquals(json_decode(json_encode($v)), $job->body, "decoded value $i");
            $this->assertSame(json_encode($v), json_encode($job->body), "re-encoded value $i");
        }
        $this->assertSame(PHP_INT_MAX, $c->get($t, 'val-2')->json()['big']);

        // Bytes.
        $bin = "\x00\xff\xfe binary \r\n" . random_bytes(64);
        $c->enqueue($t, new Bytes($bin), ['id' => 'bytes']);
        $job = $c->get($t, 'bytes');
        $this->assertSame($bin, $job->bytes);
        $this->assertNull($job->rawBody);
        $this->assertNull($job->body);

        // Through reserve and the dead letters too.
        $c->configureTopic($t, ['paused' => false]);
        $jobs = [];
        for ($k = 0; $k < 20 && count($jobs) < 14; $k++) {
            array_push($jobs, ...$c->reserve($t, ['max' => 100, 'wait_ms' => 200]));
        }
        $byId = [];
        foreach ($jobs as $j) {
            $byId[$j->id] = $j;
        }
        $this->assertCount(14, $byId);
        $this->assertSame($texts[0], $byId['raw-0']->rawBody);
        $this->assertSame($bin, $byId['bytes']->bytes);
        $c->nack($t, 'raw-0', $byId['raw-0']->token, ['dead' => true, 'error' => 'x']);
        $dead = $c->listDead($t);
        $this->assertCount(1, $dead);
        $this->assertSame($texts[0], $dead[0]->rawBody);
        $c->deleteTopic($t);
    }

    public function testEnqueueOptionsGetCancelReschedule(): void
    {
        $c = $this->client();
        $t = self::topic('enqueue');
        $r = $c->enqueue($t, ['order' => 42], ['id' => 'order-42', 'delay_ms' => 60_000, 'priority' => 7]);
        $this->assertSame('order-42', $r['id']);
        $this->assertTrue($r['created']);
        $this->assertSame('scheduled', $r['state']);
        $this->assertGreaterThanOrEqual(self::nowMs() + 50_000, $r['due_at_ms']);

        $again = $c->enqueue($t, ['order' => 43], ['id' => 'order-42']);
        $this->assertFalse($again['created']);
        $this->assertSame(42, $c->get($t, 'order-42')->body->order);

        $repl = $c->enqueue($t, ['order' => 44], ['id' => 'order-42', 'replace' => true, 'delay_ms' => 120_000]);
        $this->assertTrue($repl['replaced']);
        $job = $c->get($t, 'order-42');
        $this->assertSame(44, $job->body->order);
        $this->assertSame('scheduled', $job->state);
        $this->assertSame(0, $job->attempts);

        $auto = $c->enqueue($t, 'no id');
        $this->assertNotSame('', $auto['id']);
        $this->assertSame('ready', $auto['state']);

        $due = self::nowMs() + 3_600_000;
        $r = $c->enqueue($t, null, ['id' => 'at', 'due_at_ms' => $due, 'key' => 'tenant-1']);
        $this->assertSame($due, $r['due_at_ms']);
        $this->assertSame('tenant-1', $c->get($t, 'at')->data['key']);

        $r = $c->reschedule($t, 'at', ['delay_ms' => 0]);
        $this->assertSame('at', $r['id']);
        $this->assertLessThanOrEqual(self::nowMs() + 1000, $r['due_at_ms']);
        $r = $c->reschedule($t, 'at', ['due_at_ms' => $due]);
        $this->assertSame($due, $r['due_at_ms']);

        $r = $c->cancel($t, 'at');
        $this->assertTrue($r['cancelled']);
        $this->assertSame('scheduled', $r['state']);
        self::assertDq(fn () => $c->get($t, 'at'), 404, 'job_not_found');
        self::assertDq(fn () => $c->cancel($t, 'at'), 404, 'job_not_found');
        self::assertDq(fn () => $c->reschedule($t, 'nope', ['delay_ms' => 1]), 404, 'job_not_found');

        // Dedup window: the id cannot come back within it once the job ended.
        $c->enqueue($t, 1, ['id' => 'dd', 'dedup_ms' => 60_000]);
        $c->cancel($t, 'dd');
        $r = $c->enqueue($t, 2, ['id' => 'dd']);
        $this->assertFalse($r['created']);
        $this->assertTrue($r['deduplicated']);

        // Errors of bad input.
        self::assertDq(fn () => $c->enqueue('bad topic!', 1), 400, 'invalid_topic');
        self::assertDq(fn () => $c->enqueue($t, 1, ['delay_ms' => -1]), 400, 'invalid_delay');
        self::assertDq(fn () => $c->enqueue($t, 1, ['delay_ms' => 1, 'due_at_ms' => 1]), 400, 'invalid_delay');
        self::assertDq(fn () => $c->enqueue($t, 1, ['dealy_ms' => 1]), 400, 'invalid_json');
        self::assertDq(fn () => $c->enqueue($t, 1, ['id' => "white space"]), 400, 'invalid_id');
        self::assertDq(fn () => $c->enqueue($t, new RawJson('{not json')), 400, 'invalid_json');
        self::assertDq(fn () => $c->get($t, 'never'), 404, 'job_not_found');
        $c->deleteTopic($t);
    }

    public function testEnqueueBatch(): void
    {
        $c = $this->client();
        $t = self::topic('batch');
        $res = $c->enqueueBatch($t, [
            ['id' => 'a', 'body' => ['n' => 1]],
            ['id' => 'b', 'body' => new RawJson('{"n": 2}'), 'delay_ms' => 60_000],
            ['id' => 'c', 'body' => 3, 'delay_ms' => -5],
            ['body' => new Bytes("\x01\x02")],
            ['id' => 'a', 'body' => 'dup'],
        ]);
        $this->assertCount(5, $res);
        $this->assertTrue($res[0]['created']);
        $this->assertSame('scheduled', $res[1]['state']);
        $this->assertSame('invalid_delay', $res[2]['error']['code']);
        $this->assertTrue($res[3]['created']);
        $this->assertFalse($res[4]['created']);
        $this->assertSame('{"n": 2}', $c->get($t, 'b')->rawBody);
        $this->assertSame("\x01\x02", $c->get($t, $res[3]['id'])->bytes);
        self::assertDq(fn () => $c->enqueueBatch($t, []), 400, 'invalid_batch');
        $c->deleteTopic($t);
    }

    public function testReserveAckNackTouchRelease(): void
    {
        $c = $this->client();
        $t = self::topic('lease');
        $c->configureTopic($t, ['max_attempts' => 5, 'retry' => ['fixed_ms' => 60_000]]);
        foreach (['j1', 'j2', 'j3', 'j4', 'j5'] as $i => $id) {
            $c->enqueue($t, ['i' => $i], ['id' => $id, 'priority' => $i]);
        }
        $this->assertSame([], $c->reserve(self::topic('empty'), ['wait_ms' => 0]));
        $jobs = $c->reserve([$t], ['max' => 5, 'lease_ms' => 30_000, 'wait_ms' => 1000]);
        $this->assertSame(['j1', 'j2', 'j3', 'j4', 'j5'], array_map(fn (Job $j) => $j->id, $jobs));
        [$j1, $j2, $j3, $j4, $j5] = $jobs;
        $this->assertSame(1, $j1->attempt);
        $this->assertSame($t, $j1->topic);
        $this->assertNotEmpty($j1->token);
        $this->assertGreaterThan(self::nowMs() + 20_000, $j1->leaseDeadlineMs);
        $this->assertSame('reserved', $c->get($t, 'j1')->state);

        // ack, and its errors.
        self::assertDq(fn () => $c->ack($t, 'j1', 'wrong-token'), 409, 'lease_mismatch');
        $c->ack($t, 'j1', $j1->token);
        self::assertDq(fn () => $c->ack($t, 'j1', $j1->token), 404, 'job_not_found');

        // touch.
        $r = $c->touch($t, 'j2', $j2->token, ['lease_ms' => 120_000]);
        $this->assertGreaterThan(self::nowMs() + 100_000, $r['lease_deadline_ms']);
        self::assertDq(fn () => $c->touch($t, 'j2', 'nope'), 409, 'lease_mismatch');
        self::assertDq(fn () => $c->touch($t, 'j2', $j2->token, ['lease_ms' => 1]), 400, 'invalid_lease');

        // nack: retried after retry_in_ms; dead.
        $r = $c->nack($t, 'j2', $j2->token, ['error' => 'boom', 'retry_in_ms' => 60_000]);
        $this->assertSame('scheduled', $r['state']);
        $job = $c->get($t, 'j2');
        $this->assertSame('boom', $job->lastError);
        $this->assertSame([1, 'boom'], [$job->errors[0]['attempt'], $job->errors[0]['error']]);
        $this->assertGreaterThan(0, $job->errors[0]['at_ms']);
        $this->assertSame(1, $job->attempts);
        $r = $c->nack($t, 'j3', $j3->token, ['error' => 'fatal', 'dead' => true]);
        $this->assertSame('dead', $r['state']);
        self::assertDq(fn () => $c->ack($t, 'j3', $j3->token), 409, 'not_in_state');

        // release: back without counting the attempt.
        $r = $c->release($t, 'j4', $j4->token, ['delay_ms' => 60_000]);
        $this->assertSame('scheduled', $r['state']);
        $this->assertSame(0, $c->get($t, 'j4')->attempts);
        $r = $c->release($t, 'j5', $j5->token);
        $this->assertSame('ready', $r['state']);

        // The batches.
        $c->reschedule($t, 'j4', ['delay_ms' => 0]);
        $c->reschedule($t, 'j2', ['delay_ms' => 0]);
        // A reserve answers with what it found first (on Redis, the jobs of
        // one partition may come before the others'): reserve until all three.
        $jobs = [];
        $deadline = microtime(true) + 5;
        while (count($jobs) < 3 && microtime(true) < $deadline) {
            array_push($jobs, ...$c->reserve($t, ['max' => 10, 'wait_ms' => 1000]));
        }
        $this->assertCount(3, $jobs);
        $byId = [];
        foreach ($jobs as $j) {
            $byId[$j->id] = $j;
        }
        $touched = $c->touchBatch([
            ['topic' => $t, 'id' => 'j2', 'token' => $byId['j2']->token, 'lease_ms' => 60_000],
            ['topic' => $t, 'id' => 'j2', 'token' => 'stale'],
        ]);
        $this->assertArrayHasKey('lease_deadline_ms', $touched[0]);
        $this->assertSame('lease_mismatch', $touched[1]['error']['code']);
        $nacked = $c->nackBatch([
            ['topic' => $t, 'id' => 'j2', 'token' => $byId['j2']->token, 'error' => 'again', 'dead' => true],
            ['topic' => $t, 'id' => 'nope', 'token' => 'x'],
        ]);
        $this->assertSame('dead', $nacked[0]['state']);
        $this->assertSame('job_not_found', $nacked[1]['error']['code']);
        $acked = $c->ackBatch([$byId['j4'], ['topic' => $t, 'id' => 'j5', 'token' => $byId['j5']->token], ['topic' => $t, 'id' => 'j5', 'token' => $byId['j5']->token]]);
        $this->assertSame([true, true], [$acked[0]['acked'], $acked[1]['acked']]);
        $this->assertSame('job_not_found', $acked[2]['error']['code']);
        self::assertDq(fn () => $c->ackBatch([]), 400, 'invalid_batch');

        // Reserve errors.
        self::assertDq(fn () => $c->reserve([]), 400, 'invalid_topics');
        self::assertDq(fn () => $c->reserve($t, ['max' => 0]), 400, 'invalid_max');
        self::assertDq(fn () => $c->reserve($t, ['wait_ms' => 999_999]), 400, 'invalid_wait');
        $c->deleteTopic($t);
    }

    public function testTopicsAndDeadLetters(): void
    {
        $c = $this->client();
        $t = self::topic('topics');
        self::assertDq(fn () => $c->getTopic($t), 404, 'topic_not_found');
        $r = $c->configureTopic($t, ['max_attempts' => 2, 'lease_ms' => 5000, 'retry' => ['fixed_ms' => 100], 'dead_cap' => 100]);
        $this->assertSame($t, $r['name']);
        $this->assertSame(2, $r['config']['max_attempts']);
        $info = $c->getTopic($t);
        $this->assertSame(5000, $info['config']['lease_ms']);
        $this->assertSame('set', $info['config_sources']['lease_ms']);
        $this->assertSame('default', $info['config_sources']['partitions']);
        $this->assertSame(0, $info['stats']['ready']);
        self::assertDq(fn () => $c->configureTopic($t, ['max_attempts' => 0]), 400, 'invalid_max_attempts');
        self::assertDq(fn () => $c->configureTopic($t, ['lease_ms' => 1]), 400, 'invalid_lease');

        $prefix = substr($t, 0, -4);
        $page = $c->listTopics(['prefix' => $prefix, 'limit' => 10]);
        $this->assertSame([$t], array_column($page['topics'], 'name'));
        $this->assertNull($page['next_cursor']);
        $this->assertSame([$t], array_column($c->topics($prefix), 'name'));
        self::assertDq(fn () => $c->listTopics(['limit' => 0]), 400, 'invalid_limit');

        // Dead letters: list, replay, purge.
        foreach (['d1', 'd2', 'd3'] as $id) {
            $c->enqueue($t, ['id' => $id], ['id' => $id]);
        }
        $jobs = $c->reserve($t, ['max' => 3, 'wait_ms' => 1000]);
        $this->assertCount(3, $jobs);
        foreach ($jobs as $j) {
            $c->nack($t, $j->id, $j->token, ['error' => "bad {$j->id}", 'dead' => true]);
        }
        $dead = $c->listDead($t);
        $this->assertSame(['d1', 'd2', 'd3'], array_map(fn (Job $j) => $j->id, $dead));
        $this->assertSame('bad d1', $dead[0]->lastError);
        $this->assertSame('dead', $dead[0]->state);
        $this->assertCount(1, $c->listDead($t, 1, 1));
        $this->assertSame(1, $c->replayDead($t, ['d1']));
        $this->assertSame('ready', $c->get($t, 'd1')->state);
        $this->assertSame(2, $c->replayDead($t));
        $jobs = $c->reserve($t, ['max' => 3, 'wait_ms' => 1000]);
        foreach ($jobs as $j) {
            $c->nack($t, $j->id, $j->token, ['dead' => true]);
        }
        $this->assertSame(3, $c->purgeDead($t));
        $this->assertSame([], $c->listDead($t));
        self::assertDq(fn () => $c->listDead(self::topic('nope')), 404, 'topic_not_found');
        self::assertDq(fn () => $c->purgeDead(self::topic('nope')), 404, 'topic_not_found');

        // Export listing.
        $c->enqueue($t, ['x' => (object) []], ['id' => 'e1', 'delay_ms' => 60_000]);
        $page = $c->listJobs($t, ['limit' => 100]);
        $this->assertSame('{"x":{}}', $page['jobs'][0]->rawBody);

        $r = $c->deleteTopic($t);
        $this->assertSame(1, $r['deleted_jobs']);
        self::assertDq(fn () => $c->deleteTopic($t), 404, 'topic_not_found');
    }

    public function testSchedules(): void
    {
        $c = $this->client();
        $name = self::topic('sched');
        $t = self::topic('sched-topic');
        $s = $c->putSchedule($name, ['topic' => $t, 'every' => '1h', 'body' => ['report' => 'daily', 'opts' => (object) []]]);
        $this->assertSame($name, $s['name']);
        $this->assertNotEmpty($s['next']);
        $this->assertSame($name, $c->getSchedule($name)['name']);
        $this->assertContains($name, array_column($c->listSchedules(), 'name'));
        $p = $c->pauseSchedule($name);
        $this->assertTrue($p['spec']['paused']);
        $this->assertSame([], $p['next'] ?? []);
        $r = $c->resumeSchedule($name);
        $this->assertFalse($r['spec']['paused'] ?? false);
        $d = $c->deleteSchedule($name);
        $this->assertTrue($d['deleted']);
        self::assertDq(fn () => $c->getSchedule($name), 404, 'schedule_not_found');
        self::assertDq(fn () => $c->putSchedule($name, ['topic' => $t, 'cron' => 'nonsense']), 400, 'invalid_cron');
        self::assertDq(fn () => $c->putSchedule($name, ['topic' => $t, 'every' => '1h', 'timezone' => 'Mars/Base']), 400, 'invalid_timezone');
    }

    public function testTransportErrorsAndFork(): void
    {
        $dead = new Client('http://127.0.0.1:' . DqServer::freePort(), ['retry_for_ms' => 0, 'connect_timeout' => 1]);
        try {
            $dead->get('t', 'x');
            $this->fail('expected a TransportException');
        } catch (TransportException $e) {
            $this->assertTrue($e->connectFailed);
            $this->assertSame(CURLE_COULDNT_CONNECT, $e->curlErrno);
        }
        // Retried within the budget, then raised.
        $start = microtime(true);
        try {
            (new Client('http://127.0.0.1:' . DqServer::freePort(), ['retry_for_ms' => 700]))->get('t', 'x');
            $this->fail('expected a TransportException');
        } catch (TransportException) {
            $took = microtime(true) - $start;
            $this->assertGreaterThan(0.3, $took);
            $this->assertLessThan(3.0, $took);
        }

        // One connection per process: a forked child makes its own; the
        // parent's goes on working.
        $c = $this->client();
        $t = self::topic('fork');
        $c->enqueue($t, 'parent', ['id' => 'p0']);
        $pid = pcntl_fork();
        if ($pid === 0) {
            $ok = true;
            try {
                for ($i = 0; $i < 20; $i++) {
                    $c->enqueue($t, 'child', ['id' => "c$i"]);
                }
            } catch (\Throwable) {
                $ok = false;
            }
            posix_kill(getmypid(), $ok ? SIGUSR1 : SIGUSR2); // end without running PHPUnit's shutdown
        }
        for ($i = 0; $i < 20; $i++) {
            $c->enqueue($t, 'parent', ['id' => "p$i"]);
        }
        pcntl_waitpid($pid, $status);
        $this->assertSame(SIGUSR1, pcntl_wtermsig($status), 'the child\'s calls succeeded');
        $this->assertSame(40, $c->getTopic($t)['stats']['ready']);
        $c->deleteTopic($t);
    }
}
