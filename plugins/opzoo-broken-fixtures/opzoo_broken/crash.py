raise RuntimeError("this plugin module fails to import")
