<?php

declare(strict_types=1);

namespace Dq\Tests;

use Dq\Client;
use Dq\Tests\Support\DqServer;
use Dq\TransportException;
use PHPUnit\Framework\TestCase;

/** HTTPS with a self-signed certificate (a server of its own, embedded store). */
final class TlsTest extends TestCase
{
    public function testTlsWithCaFileAndVerification(): void
    {
        $dir = sys_get_temp_dir() . '/dq-php-tls-' . bin2hex(random_bytes(4));
        mkdir($dir);
        exec(sprintf(
            'openssl req -x509 -newkey rsa:2048 -nodes -keyout %1$s/key.pem -out %1$s/cert.pem -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>&1',
            escapeshellarg($dir),
        ), $out, $rc);
        if ($rc !== 0) {
            $this->markTestSkipped('openssl cannot make a certificate: ' . implode("\n", $out));
        }
        $srv = DqServer::start('embedded', ['--tls-cert', "$dir/cert.pem", '--tls-key', "$dir/key.pem"]);
        try {
            $this->assertStringStartsWith('https://', $srv->url);
            $c = new Client($srv->url, ['tls' => ['ca_file' => "$dir/cert.pem"]]);
            $c->enqueue('tls', ['over' => 'https'], ['id' => 'a']);
            $this->assertSame('https', $c->get('tls', 'a')->body->over);

            $untrusted = new Client($srv->url, ['retry_for_ms' => 0]);
            try {
                $untrusted->get('tls', 'a');
                $this->fail('an unknown certificate must be refused');
            } catch (TransportException $e) {
                $this->assertContains($e->curlErrno, [CURLE_SSL_CACERT, CURLE_SSL_PEER_CERTIFICATE, 51, 60]);
            }
            $insecure = new Client($srv->url, ['tls' => ['verify' => false]]);
            $this->assertSame('a', $insecure->get('tls', 'a')->id);
        } finally {
            $srv->cleanup();
            exec('rm -rf ' . escapeshellarg($dir));
        }
    }
}
