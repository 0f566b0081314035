<?php

declare(strict_types=1);

namespace Dq\Tests\Support;

use Dq\Dead;
use Dq\Job;
use Dq\RetryLater;
use Dq\Worker;

/** The worker: the pre-fork pool (as a process of its own) and the single-process forms. */
abstract class WorkerCases extends ServerTestCase
{
    /** @var list<Pool> */
    private array $pools = [];

    protected function tearDown(): void
    {
        foreach ($this->pools as $p) {
            $p->cleanup();
        }
        $this->pools = [];
    }

    private function pool(string $topic, array $env): Pool
    {
        $p = new Pool(static::$server->url, $topic, $env);
        $this->pools[] = $p;
        return $p;
    }

    private function enqueueMany(string $topic, int $n, callable $options): void
    {
        $c = $this->client();
        for ($i = 0; $i < $n; $i += 500) {
            $batch = [];
            for ($k = $i; $k < min($n, $i + 500); $k++) {
                $batch[] = ['id' => "job-$k", 'body' => ['k' => $k]] + $options($k);
            }
            foreach ($c->enqueueBatch($topic, $batch) as $r) {
                $this->assertTrue($r['created'] ?? false, json_encode($r));
            }
        }
    }

    private function stats(string $topic): array
    {
        return $this->client()->getTopic($topic)['stats'];
    }

    /** Ids done (by "done" lines), failing on any done twice. */
    private static function doneIds(Pool $p): array
    {
        return array_map(fn ($f) => $f[1], $p->lines('done'));
    }

    private function stopPool(Pool $p): void
    {
        $children = $p->childPids();
        $p->signal(SIGTERM);
        $this->assertTrue($p->wait(30), "the pool stops on SIGTERM; stderr:\n" . $p->stderr());
        $this->assertNotEmpty($p->lines('exit'), 'run() returned');
        foreach ($children as $c) {
            $this->assertFalse(posix_kill($c, 0) && self::alive($c), "child $c is gone");
        }
    }

    private static function alive(int $pid): bool
    {
        $stat = @file_get_contents("/proc/$pid/stat");
        return $stat !== false && !preg_match('/^\d+ \(.*\) Z/', $stat);
    }

    public function testPoolOfFourRunsThousandJobsDueOverTwoSecondsNoneEarlyNoneTwiceNoneLost(): void
    {
        $t = self::topic('thousand');
        $start = self::nowMs() + 1000;
        $this->enqueueMany($t, 1000, fn ($k) => ['due_at_ms' => $start + intdiv($k * 2000, 1000)]);
        $p = $this->pool($t, ['DQ_PROCESSES' => 4, 'DQ_BATCH' => 4]);
        self::waitFor(fn () => count($p->lines('done')) >= 1000, 60, '1000 jobs done; stderr: ' . $p->stderr());
        $this->stopPool($p);

        $starts = $p->lines('start');
        $ids = array_map(fn ($f) => $f[1], $starts);
        $this->assertCount(1000, $ids, 'none twice');
        $this->assertCount(1000, array_unique($ids), 'none twice');
        $this->assertCount(1000, array_unique(self::doneIds($p)), 'none lost');
        foreach ($starts as $f) {
            [, $id, , $now, $due, $attempt] = $f;
            $this->assertGreaterThanOrEqual((int) $due, (int) $now, "job $id ran before its due time");
            $this->assertSame('1', $attempt);
        }
        $this->assertCount(4, array_unique(array_map(fn ($f) => $f[2], $starts)), 'four processes did the work');
        $s = $this->stats($t);
        $this->assertSame([0, 0, 0, 0], [$s['scheduled'], $s['ready'], $s['reserved'], $s['dead']]);
        $this->assertSame(1000, $s['counters']['acked']);
    }

    public function testHandlerThatThrowsIsRetriedThenDead(): void
    {
        $c = $this->client();
        $t = self::topic('throws');
        $c->configureTopic($t, ['max_attempts' => 3, 'retry' => ['fixed_ms' => 100]]);
        $c->enqueue($t, ['x' => 1], ['id' => 'bad']);
        $c->enqueue($t, ['x' => 2], ['id' => 'dead-at-once']);
        $c->enqueue($t, ['x' => 3], ['id' => 'later']);
        $c->enqueue($t, ['x' => 4], ['id' => 'returned-error']);
        $seen = [];
        $w = new Worker($c, ['batch' => 10, 'logger' => fn () => null]);
        $w->handle($t, function (Job $job) use (&$seen) {
            $seen[$job->id][] = $job->attempt;
            return match ($job->id) {
                'bad' => throw new \RuntimeException("boom on attempt {$job->attempt}"),
                'dead-at-once' => throw new Dead('poison message'),
                'later' => count($seen['later']) === 1 ? throw new RetryLater(200) : null,
                'returned-error' => new \InvalidArgumentException('returned, not thrown'),
            };
        });
        self::waitFor(function () use ($w, $c, $t) {
            $w->runOnce(300);
            $s = $c->getTopic($t)['stats'];
            return $s['dead'] === 3 && $s['scheduled'] + $s['ready'] + $s['reserved'] === 0;
        }, 30, 'three dead letters, the rest acked');
        $this->assertSame([1, 2, 3], $seen['bad']);
        $this->assertSame([1], $seen['dead-at-once']);
        $this->assertSame([1, 1], $seen['later'], 'RetryLater does not count an attempt');
        $this->assertSame([1, 2, 3], $seen['returned-error']);
        $dead = [];
        foreach ($c->listDead($t) as $j) {
            $dead[$j->id] = $j;
        }
        $this->assertSame('boom on attempt 3', $dead['bad']->lastError);
        $this->assertSame(3, $dead['bad']->attempts);
        $this->assertSame('poison message', $dead['dead-at-once']->lastError);
        $this->assertSame(1, $dead['dead-at-once']->attempts);
        $this->assertSame('returned, not thrown', $dead['returned-error']->lastError);
        $this->assertSame(1, $c->getTopic($t)['stats']['counters']['acked']);
        $this->assertSame(['acked' => 1, 'failed' => 6, 'dead' => 1, 'retried' => 1, 'released' => 0], $w->stats());
    }

    public function testPoolHandlerThatThrowsIsRetriedThenDead(): void
    {
        $c = $this->client();
        $t = self::topic('pool-throws');
        $c->configureTopic($t, ['max_attempts' => 3, 'retry' => ['fixed_ms' => 100]]);
        $c->enqueue($t, ['x' => 1], ['id' => 'fails-1']);
        $c->enqueue($t, ['x' => 2], ['id' => 'fails-2']);
        $p = $this->pool($t, ['DQ_PROCESSES' => 2, 'DQ_BATCH' => 1, 'DQ_FAIL' => 1]);
        self::waitFor(
            fn () => $c->getTopic($t)['stats']['dead'] === 2,
            30,
            'both jobs dead after three attempts; stderr: ' . $p->stderr(),
        );
        $this->stopPool($p);
        $attempts = [];
        foreach ($p->lines('start') as $f) {
            $attempts[$f[1]][] = (int) $f[5];
        }
        ksort($attempts);
        $this->assertSame(['fails-1' => [1, 2, 3], 'fails-2' => [1, 2, 3]], $attempts);
        $this->assertSame([], $p->lines('done'), 'no handler returned');
        foreach ($c->listDead($t) as $j) {
            $this->assertSame('handler failed on purpose', $j->lastError);
            $this->assertSame(3, $j->attempts);
        }
        $s = $this->stats($t);
        $this->assertSame([0, 0, 0, 2], [$s['scheduled'], $s['ready'], $s['reserved'], $s['dead']]);
        $this->assertSame(6, $s['counters']['failed']);
    }

    public function testHandlerSlowerThanTheLeaseKeepsItsLease(): void
    {
        $t = self::topic('slow');
        $this->client()->enqueue($t, ['slow' => true], ['id' => 'slow-1']);
        // Two processes reserving: an expired lease would hand the job to the other.
        $p = $this->pool($t, ['DQ_PROCESSES' => 2, 'DQ_LEASE_MS' => 2000, 'DQ_SLEEP_MS' => 6000, 'DQ_BATCH' => 1]);
        self::waitFor(fn () => count($p->lines('done')) >= 1, 30, 'the slow job done; stderr: ' . $p->stderr());
        // A second delivery could only come after the lease (2 s) ran out.
        usleep(2_500_000);
        $this->stopPool($p);
        $this->assertCount(1, $p->lines('start'), 'handed out once');
        $this->assertCount(1, $p->lines('done'));
        $s = $this->stats($t);
        $this->assertSame(1, $s['counters']['acked']);
        $this->assertSame(0, $s['counters']['expired'] ?? 0);
        $this->assertSame(0, $s['counters']['failed']);
        $this->assertSame(0, $s['reserved'] + $s['ready'] + $s['scheduled']);
    }

    public function testRunOnceExtendsTheLeaseOfALongHandler(): void
    {
        $c = $this->client();
        $t = self::topic('long-once');
        $c->enqueue($t, 'slow', ['id' => 'long']);
        $other = $this->client();
        $w = new Worker($c, ['lease_ms' => 2000, 'batch' => 1]);
        $w->handle($t, function (Job $job) use ($other, $t) {
            $until = microtime(true) + 3.5;
            while (($left = $until - microtime(true)) > 0) {
                usleep((int) ($left * 1e6));
                // Nobody else can take it meanwhile.
                $this->assertSame([], $other->reserve($t));
            }
        });
        $this->assertSame(1, $w->runOnce(1000));
        $s = $c->getTopic($t)['stats'];
        $this->assertSame([1, 0, 0], [$s['counters']['acked'], $s['counters']['expired'], $s['counters']['failed']]);
    }

    public function testSigtermMidRunAcksInFlightAndLeavesNothingReserved(): void
    {
        $t = self::topic('sigterm');
        $this->enqueueMany($t, 60, fn ($k) => []);
        $p = $this->pool($t, ['DQ_PROCESSES' => 4, 'DQ_BATCH' => 3, 'DQ_SLEEP_MS' => 700]);
        self::waitFor(fn () => count($p->lines('start')) >= 6, 30, 'handlers running; stderr: ' . $p->stderr());
        $this->stopPool($p);
        $started = array_map(fn ($f) => $f[1], $p->lines('start'));
        $done = self::doneIds($p);
        $this->assertNotEmpty($started);
        $this->assertLessThan(60, count($started), 'stopped mid-run');
        $this->assertSame(array_values(array_unique($started)), $started);
        sort($started);
        sort($done);
        $this->assertSame($started, $done, 'every job started was finished');
        $c = $this->client();
        foreach ($started as $id) {
            try {
                $c->get($t, $id);
                $this->fail("job $id finished but not acked");
            } catch (\Dq\DqException $e) {
                $this->assertSame('job_not_found', $e->errorCode);
            }
        }
        $s = $this->stats($t);
        $this->assertSame(0, $s['reserved'], 'nothing left reserved');
        $this->assertSame(60 - count($started), $s['ready']);
        $this->assertSame(count($started), $s['counters']['acked']);
        $this->assertSame(0, $s['counters']['failed']);
    }

    public function testHandlerPastTheGraceIsAbandonedAndItsJobComesBack(): void
    {
        $t = self::topic('grace');
        $this->client()->configureTopic($t, ['retry' => ['fixed_ms' => 100]]);
        $this->client()->enqueue($t, 'long', ['id' => 'long']);
        $p = $this->pool($t, ['DQ_PROCESSES' => 1, 'DQ_BATCH' => 1, 'DQ_SLEEP_MS' => 20000, 'DQ_LEASE_MS' => 3000, 'DQ_GRACE_MS' => 1000]);
        self::waitFor(fn () => count($p->lines('start')) >= 1, 30, 'the handler started');
        $start = microtime(true);
        $p->signal(SIGTERM);
        $this->assertTrue($p->wait(10), 'the pool stops within the grace');
        $this->assertLessThan(6.0, microtime(true) - $start);
        $this->assertSame([], $p->lines('done'));
        $this->assertStringContainsString('still running after the grace period', $p->stderr());
        // Its lease (3 s) ends and the job is due again: not lost.
        $job = self::waitFor(function () use ($t) {
            $j = $this->client()->get($t, 'long');
            return $j->state !== 'reserved' ? $j : null;
        }, 15, 'the job is back');
        $this->assertContains($job->state, ['ready', 'scheduled']);
        $this->assertSame('lease expired', $job->lastError);
    }

    public function testKilledChildIsReplacedAndNoJobIsLost(): void
    {
        $t = self::topic('sigkill');
        $this->client()->configureTopic($t, ['retry' => ['fixed_ms' => 100]]);
        $this->enqueueMany($t, 150, fn ($k) => []);
        $p = $this->pool($t, ['DQ_PROCESSES' => 2, 'DQ_BATCH' => 2, 'DQ_SLEEP_MS' => 20, 'DQ_LEASE_MS' => 2000]);
        self::waitFor(fn () => count($p->lines('done')) >= 10 && count($p->childPids()) >= 2, 30, 'two children working');
        $victim = $p->childPids()[0];
        posix_kill($victim, SIGKILL);
        self::waitFor(fn () => count($p->childPids()) >= 3, 15, 'a new child started; stderr: ' . $p->stderr());
        self::waitFor(fn () => count(array_unique(self::doneIds($p))) >= 150, 60, 'all 150 done; stderr: ' . $p->stderr());
        $this->stopPool($p);
        $this->assertContains($victim, $p->childPids());
        $this->assertStringContainsString("child $victim killed by signal 9", $p->stderr());
        $s = $this->stats($t);
        $this->assertSame(0, $s['reserved'] + $s['ready'] + $s['scheduled'] + $s['dead']);
        $this->assertSame(150, $s['counters']['acked']);
    }

    public function testMaxJobsRestartsChildren(): void
    {
        $t = self::topic('maxjobs');
        $this->enqueueMany($t, 40, fn ($k) => []);
        $p = $this->pool($t, ['DQ_PROCESSES' => 2, 'DQ_BATCH' => 2, 'DQ_MAX_JOBS' => 5]);
        self::waitFor(fn () => count(array_unique(self::doneIds($p))) >= 40, 60, 'all 40 done; stderr: ' . $p->stderr());
        $this->stopPool($p);
        $perChild = array_count_values(array_map(fn ($f) => $f[2], $p->lines('start')));
        $this->assertGreaterThanOrEqual(8, count($p->childPids()), 'children replaced after 5 jobs each');
        $this->assertLessThanOrEqual(5, max($perChild));
        $this->assertCount(40, $p->lines('start'), 'no job twice');
        $s = $this->stats($t);
        $this->assertSame(40, $s['counters']['acked']);
        $this->assertSame(0, $s['reserved'] + $s['ready']);
    }

    public function testMemoryLimitRestartsChildren(): void
    {
        $t = self::topic('memory');
        $this->enqueueMany($t, 30, fn ($k) => []);
        $p = $this->pool($t, ['DQ_PROCESSES' => 1, 'DQ_BATCH' => 1, 'DQ_MEMORY_MB' => 12, 'DQ_LEAK_KB' => 1024]);
        self::waitFor(fn () => count(array_unique(self::doneIds($p))) >= 30, 60, 'all 30 done; stderr: ' . $p->stderr());
        $this->stopPool($p);
        $this->assertGreaterThanOrEqual(3, count($p->childPids()), 'a child over 12 MB is replaced');
        $this->assertCount(30, $p->lines('start'), 'no job twice');
        $this->assertSame(30, $this->stats($t)['counters']['acked']);
    }

    public function testWorkerReconnectsAfterDqRestart(): void
    {
        $t = self::topic('restart');
        $start = self::nowMs() + 500;
        $this->enqueueMany($t, 300, fn ($k) => ['due_at_ms' => $start + $k * 10]);
        $p = $this->pool($t, ['DQ_PROCESSES' => 2, 'DQ_BATCH' => 2, 'DQ_LEASE_MS' => 3000]);
        self::waitFor(fn () => count($p->lines('done')) >= 50, 30, '50 jobs done');
        static::$server->restart();
        self::waitFor(fn () => count(array_unique(self::doneIds($p))) >= 300, 90, 'all 300 done after the restart; stderr: ' . $p->stderr());
        $this->stopPool($p);
        $s = self::waitFor(function () use ($t) {
            $s = $this->stats($t);
            return $s['reserved'] + $s['ready'] + $s['scheduled'] === 0 ? $s : null;
        }, 10, 'nothing left');
        $this->assertSame(0, $s['dead']);
    }

    public function testSingleProcessWorkWithClassAndObjectHandlers(): void
    {
        $c = $this->client();
        $t1 = self::topic('work-a');
        $t2 = self::topic('work-b');
        for ($i = 0; $i < 6; $i++) {
            $c->enqueue($t1, ['i' => $i]);
            $c->enqueue($t2, ['i' => $i]);
        }
        RecordingHandler::$seen = [];
        $w = null;
        $w = new Worker($c, ['batch' => 2, 'wait_ms' => 200, 'logger' => function (string $level, string $msg) use (&$w) {
            if (str_starts_with($msg, 'reserve failed')) {
                $w->stop(); // never hang the suite on a server gone
            }
        }]);
        $w->handle($t1, RecordingHandler::class);
        // Both handlers stop the worker once all 12 jobs were seen.
        RecordingHandler::$after = function () use (&$w) {
            if (count(RecordingHandler::$seen) >= 12) {
                $w->stop();
            }
        };
        $w->handle($t2, new class () {
            public function handle(Job $job): void
            {
                RecordingHandler::$seen[] = $job->topic;
                (RecordingHandler::$after)();
            }
        });
        $n = $w->work();
        $this->assertSame(12, $n);
        $this->assertSame(6, count(array_keys(RecordingHandler::$seen, $t1, true)));
        $s1 = $c->getTopic($t1)['stats'];
        $s2 = $c->getTopic($t2)['stats'];
        $this->assertSame([6, 6, 0, 0], [$s1['counters']['acked'], $s2['counters']['acked'], $s1['reserved'], $s2['reserved']]);
    }
}

final class RecordingHandler
{
    public static array $seen = [];
    /** @var \Closure */
    public static $after;

    public function handle(Job $job): void
    {
        self::$seen[] = $job->topic;
        (self::$after)();
    }
}
