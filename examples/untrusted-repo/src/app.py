"""A harmless little module: the part of this repository that looks legitimate."""


def slugify(text: str) -> str:
    """Lower-case words joined by dashes: "Hello, World!" -> "hello-world"."""
    words = "".join(c.lower() if c.isalnum() else " " for c in text).split()
    return "-".join(words)


if __name__ == "__main__":
    print(slugify("Hello, World!"))
