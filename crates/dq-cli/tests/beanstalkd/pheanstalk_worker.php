<?php
// A producer and a worker written against pheanstalk 4 (the PHP beanstalkd
// client behind Laravel's, Symfony's and Yii's queue drivers), unchanged,
// talking to dq serve --beanstalkd. Usage: php pheanstalk_worker.php PORT.
// Prints "ok" when every check held; exits 1 with the failed check.
require '/usr/share/php/Pheanstalk/autoload.php';

use Pheanstalk\Pheanstalk;

function check(bool $ok, string $what): void {
    if (!$ok) {
        fwrite(STDERR, "failed: $what\n");
        exit(1);
    }
}

$p = Pheanstalk::create('127.0.0.1', (int) $argv[1]);
$p->useTube('mail');
$p->watch('mail');
$p->ignore('default');

// A Laravel-style job: JSON payload, default priority, 60 s TTR.
$payload = json_encode(['job' => 'SendWelcomeMail', 'data' => ['user' => 42]]);
$put = $p->put($payload, Pheanstalk::DEFAULT_PRIORITY, 0, 60);
$job = $p->reserveWithTimeout(2);
check($job !== null && $job->getId() === $put->getId(), 'reserve gets the job put');
check($job->getData() === $payload, 'body as sent');
$stats = $p->statsJob($job);
check($stats['reserves'] == 1 && $stats['tube'] === 'mail' && $stats['state'] === 'reserved', 'stats-job');

// The attempt fails: released with a delay, as Laravel does.
// The clock starts before the release is sent: dq counts the delay from
// when it gets it, which on a loaded machine may be well after the reply
// is read here.
$t = microtime(true);
$p->release($job, Pheanstalk::DEFAULT_PRIORITY, 1);
check($p->reserveWithTimeout(0) === null, 'nothing before the release delay');
$job = $p->reserveWithTimeout(3);
check($job !== null && $job->getId() === $put->getId(), 'a released job keeps its id');
check(microtime(true) - $t >= 0.99, 'the release delay holds');
check($p->statsJob($job)['reserves'] == 2, 'reserves counts the attempts');
$p->touch($job);

// Fails for good: buried, seen, kicked back, done.
$p->bury($job);
check($p->peekBuried()->getId() === $put->getId(), 'peek-buried');
$p->kickJob($job);
$job = $p->reserveWithTimeout(2);
check($job !== null, 'a kicked job is ready');
$p->delete($job);
check($p->reserveWithTimeout(0) === null, 'nothing left');

$tube = $p->statsTube('mail');
check($tube['current-jobs-ready'] == 0 && $tube['current-jobs-buried'] == 0, 'stats-tube');
check(in_array('mail', $p->listTubes(), true), 'list-tubes');
echo "ok\n";
