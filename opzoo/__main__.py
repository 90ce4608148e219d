from opzoo.cli import console

console()
