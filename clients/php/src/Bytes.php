<?php

declare(strict_types=1);

namespace Dq;

/**
 * A job body of bytes (any binary string), sent as `body_base64`; the job
 * comes back with `$job->bytes` set and `$job->body` null.
 */
final class Bytes
{
    public function __construct(public readonly string $bytes)
    {
    }
}
