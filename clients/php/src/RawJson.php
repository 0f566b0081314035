<?php

declare(strict_types=1);

namespace Dq;

/**
 * A job body given as JSON text, sent as it is (key order, spacing, number
 * spelling kept): `$client->enqueue('t', new Dq\RawJson('{"n": 18446744073709551617}'))`.
 * dq checks that it is JSON (400 `invalid_json` otherwise).
 */
final class RawJson
{
    public function __construct(public readonly string $json)
    {
    }

    public function __toString(): string
    {
        return $this->json;
    }
}
