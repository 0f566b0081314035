<?php

declare(strict_types=1);

namespace Dq\Tests;

use Dq\Tests\Support\WorkerCases;

final class WorkerRedisTest extends WorkerCases
{
    protected static function store(): string
    {
        return 'redis';
    }
}
