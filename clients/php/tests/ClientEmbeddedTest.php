<?php

declare(strict_types=1);

namespace Dq\Tests;

use Dq\Tests\Support\ClientCases;

final class ClientEmbeddedTest extends ClientCases
{
    protected static function store(): string
    {
        return 'embedded';
    }
}
