import opzoo


@opzoo.hookimpl
def opzoo_ops():
    raise ValueError("this hook always fails")
