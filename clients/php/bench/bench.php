<?php
// Benchmark (not a test): enqueue JOBS jobs due now to a fresh topic, run the
// pre-fork pool with a no-op handler at 16 processes until every job is
// acked, print "jobs/s: <n>" (acked jobs / seconds from the pool's start to
// the last ack).
//
//   DQ_URL=http://127.0.0.1:7070 JOBS=20000 php clients/php/bench/bench.php
//
// Options: PROCESSES (16), BATCH (jobs per reserve per child, 10).
declare(strict_types=1);

require __DIR__ . '/../autoload.php';

$url = getenv('DQ_URL') ?: 'http://127.0.0.1:7070';
$jobs = (int) (getenv('JOBS') ?: 20000);
$processes = (int) (getenv('PROCESSES') ?: 16);
$batch = (int) (getenv('BATCH') ?: 10);
$topic = 'bench-php-' . bin2hex(random_bytes(4));
$client = new Dq\Client($url);

for ($i = 0; $i < $jobs; $i += 1000) {
    $batchJobs = [];
    for ($k = $i; $k < min($jobs, $i + 1000); $k++) {
        $batchJobs[] = ['body' => ['n' => $k]];
    }
    $client->enqueueBatch($topic, $batchJobs);
}
fwrite(STDERR, "enqueued $jobs jobs to $topic\n");

// The master watches the topic's acked counter and stops the pool when it
// reaches JOBS; the time of the last ack is read from the counter's change.
$client->close();
$worker = new Dq\Worker($client, ['processes' => $processes, 'batch' => $batch, 'wait_ms' => 1000]);
$worker->handle($topic, static function (Dq\Job $job): void {
});
$start = microtime(true);
$master = getmypid();
$watcher = pcntl_fork();
if ($watcher === 0) {
    $c = new Dq\Client($url);
    $last = 0;
    $lastAt = microtime(true);
    while (true) {
        $acked = $c->getTopic($topic)['stats']['counters']['acked'];
        if ($acked !== $last) {
            $last = $acked;
            $lastAt = microtime(true);
        }
        if ($acked >= $jobs) {
            break;
        }
        usleep(20_000);
    }
    file_put_contents(sys_get_temp_dir() . "/dq-php-bench-$master", (string) $lastAt);
    posix_kill($master, SIGTERM);
    posix_kill(getmypid(), SIGKILL);
}
$worker->run();
pcntl_waitpid($watcher, $status);
$file = sys_get_temp_dir() . "/dq-php-bench-$master";
$lastAck = (float) file_get_contents($file);
unlink($file);
$client->deleteTopic($topic);
printf("jobs/s: %d\n", (int) round($jobs / ($lastAck - $start)));
