<?php

declare(strict_types=1);

namespace Dq\Tests;

use Dq\Tests\Support\WorkerCases;

final class WorkerEmbeddedTest extends WorkerCases
{
    protected static function store(): string
    {
        return 'embedded';
    }
}
