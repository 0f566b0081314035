<?php
// Loads the Dq\ classes without Composer: require 'clients/php/autoload.php';
declare(strict_types=1);

spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'Dq\\', 3) !== 0) {
        return;
    }
    $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, 3)) . '.php';
    if (is_file($file)) {
        require $file;
    }
});
