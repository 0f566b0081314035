<?php

declare(strict_types=1);

namespace Dq\Tests;

use Dq\Job;
use Dq\Json;
use PHPUnit\Framework\TestCase;

/** The raw-body scanner and the body encoding (no server). */
final class JsonTest extends TestCase
{
    public function testRawValuesFindsEachBodyInOrderAndSkipsInsideBodies(): void
    {
        $text = '{"jobs":[{"id":"a","body":{"body":"inner","s":"}]\\"{["},"x":1},'
            . '{"id":"b","body_base64":"AA=="},{"id":"c","body" : 18446744073709551617 },{"id":"d","body":"str\\"ing"},'
            . '{"id":"e","body":[1,[2,{}]]},{"id":"f","body":null}]}';
        $this->assertSame(
            ['{"body":"inner","s":"}]\\"{["}', '18446744073709551617', '"str\\"ing"', '[1,[2,{}]]', 'null'],
            Json::rawValues($text),
        );
        $jobs = Job::listFrom(Json::decode($text)['jobs'], $text, 'T');
        $this->assertSame('{"body":"inner","s":"}]\\"{["}', $jobs[0]->rawBody);
        $this->assertSame("\0", $jobs[1]->bytes);
        $this->assertSame('18446744073709551617', $jobs[2]->rawBody);
        $this->assertSame('18446744073709551617', $jobs[2]->body);
        $this->assertSame('str"ing', $jobs[3]->body);
        $this->assertSame('T', $jobs[0]->topic);
        $this->assertNull($jobs[5]->body);
        $this->assertSame([], Json::rawValues('{"jobs":[]}'));
    }

    public function testRequestsAreObjectsAndBodiesSplicedIn(): void
    {
        $this->assertSame('{}', Json::encodeRequest([]));
        $this->assertSame('{"body":{}}', Json::withBody(new \stdClass(), []));
        $this->assertSame('{"body":[]}', Json::withBody([], []));
        $this->assertSame('{"body":{"a": 1},"id":"x"}', Json::withBody(new \Dq\RawJson('{"a": 1}'), ['id' => 'x']));
        $this->assertSame('{"body_base64":"AAE="}', Json::withBody(new \Dq\Bytes("\0\1"), []));
        $this->assertSame('{"body":"é/😀","n":1.0}', Json::withBody('é/😀', ['n' => 1.0]));
        $this->expectException(\InvalidArgumentException::class);
        Json::withBody("\xff invalid utf-8", []);
    }
}
