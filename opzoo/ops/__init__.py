"""opzoo's built-in ops. They reach the registry only through opzoo's own ``opzoo.ops`` entry points."""
