import Salut
