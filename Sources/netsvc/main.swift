import ArgumentParser
import Salut
