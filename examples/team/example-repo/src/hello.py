def hello(name: str) -> str:
    return f"hello, {name}"
