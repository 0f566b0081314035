<?php

declare(strict_types=1);

namespace Dq\Tests;

use Dq\Tests\Support\ClientCases;

final class ClientRedisTest extends ClientCases
{
    protected static function store(): string
    {
        return 'redis';
    }
}
